"""The reach arm's scripted expert: its IK, its chunks, and reaching targets in closed loop
through the real controllers.stack.ControlStack (lockstep on sim time, no wall clock)."""

from __future__ import annotations

import numpy as np
import pytest

from examples.arm_reach.expert import VMAX, ReachExpert
from examples.arm_reach.kinematics import JointGoal
from examples.arm_reach.lockstep import action_spec, load_robot, run
from examples.arm_reach.observe import obs_body, obs_from_body, observe
from examples.arm_reach.sim import ArmSim
from examples.arm_reach.task import ReachConfig, ReachTask

_, CONTROL, HARDWARE = load_robot()
SPEC = action_spec(CONTROL)


def test_ik_puts_the_tip_on_targets_across_the_workspace_within_a_millimetre():
    goal, task = JointGoal(CONTROL), ReachTask(ReachConfig(seed=3))
    task.start(0)
    for _ in range(40):
        q, err = goal.solve(task.target)
        assert err < 1e-3 and np.linalg.norm(goal.tip(q) - task.target) < 1e-3
        assert all(a.workspace[0] <= v <= a.workspace[1] for a, v in zip(CONTROL.axes, q))
        assert np.array_equal(goal.solve(task.target)[0], q)  # a function of the target
        task._next(0)


def test_chunk_is_h_by_n_joint_angles_moving_towards_the_goal_within_the_speed_limit():
    sim = ArmSim(CONTROL, **HARDWARE)
    expert = ReachExpert(CONTROL, SPEC)
    obs = obs_from_body(obs_body(observe(sim)))  # what the expert node receives
    chunk = expert.act(obs)
    goal = expert.joint_goal(obs["target"])
    assert chunk.shape == (SPEC.horizon, CONTROL.n) and chunk.dtype == np.float32
    dist = np.linalg.norm(chunk - goal, axis=1)
    assert np.all(np.diff(dist) < 1e-6) and dist[-1] < np.linalg.norm(sim.qpos - goal)
    steps = np.diff(np.vstack([sim.qpos, chunk]), axis=0) / (SPEC.period_ns * 1e-9)
    assert np.abs(steps).max() <= VMAX + 1e-3
    assert (chunk >= np.float32(SPEC.low)).all() and (chunk <= np.float32(SPEC.high)).all()


@pytest.mark.parametrize("latency_ms", [0, 20])
def test_expert_reaches_every_target_through_the_control_stack(latency_ms):
    sim = ArmSim(CONTROL, **{**HARDWARE, "seed": 11})
    r = run(sim, ReachExpert(CONTROL, SPEC).act, targets=8, latency_ms=latency_ms)
    assert r["targets"] == 8 and r["reached"] == 8, r
    assert r["reach_s"]["max"] < 2.0 and r["stack"]["effort_clamps"] == 0


def test_a_frozen_policy_reaches_nothing():
    sim = ArmSim(CONTROL, **{**HARDWARE, "seed": 11})
    hold = sim.qpos.copy().astype(np.float32)
    r = run(sim, lambda obs: np.tile(hold, (SPEC.horizon, 1)), targets=2)
    assert r["reached"] == 0 and r["missed"] == 2
