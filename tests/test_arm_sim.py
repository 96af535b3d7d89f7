"""The reach arm's MJCF and its hardware class (examples/arm_reach): the model is what the
robot config declares, and ArmSim honours controllers.hardware's contract (units, reused
state, copied commands, a gravity hook that holds the arm still at zero feedback)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from controllers.config import ControlConfig
from controllers.hardware import Command
from examples.arm_reach.lockstep import load_robot
from examples.arm_reach.scene import ArmGeometry, build_mjcf
from examples.arm_reach.sim import ArmSim, ready_pose
from examples.arm_reach.task import ReachConfig

NAME, CONTROL, HARDWARE = load_robot()
G = 9.81


def make_sim(**over) -> ArmSim:
    return ArmSim(CONTROL, **{**HARDWARE, **over})


def test_mjcf_has_one_torque_motor_per_declared_axis_with_its_range_and_limit():
    m = mujoco.MjModel.from_xml_string(build_mjcf(CONTROL))
    assert NAME == "arm" and m.njnt == m.nu == CONTROL.n == 4
    for _i, a in enumerate(CONTROL.axes):
        j = m.joint(a.name)
        assert j.type[0] == mujoco.mjtJoint.mjJNT_HINGE
        assert tuple(j.range) == (a.low, a.high) and j.limited[0] == 1
        act = m.actuator(f"tau_{a.name}")
        assert act.trnid[0] == j.id and act.gear[0] == 1.0
        assert tuple(act.ctrlrange) == (-a.effort_limit, a.effort_limit)
        assert (a.unit, a.mode) == ("rad", "effort")
    assert m.opt.timestep == 0.001
    assert list(m.jnt_axis[0]) == [0, 0, 1] and all(
        list(m.jnt_axis[i]) == [0, 1, 0] for i in range(1, 4)
    )


def test_a_config_that_does_not_fit_the_arm_is_refused_in_one_line():
    d = CONTROL.to_dict()
    three = ControlConfig.from_dict({**d, "axes": d["axes"][:3]})
    with pytest.raises(ValueError, match="3 axes for a 4-joint arm"):
        build_mjcf(three)
    with pytest.raises(ValueError, match=r"unknown keys \['sed'\] for the reach arm"):
        make_sim(sed=3)
    with pytest.raises(ValueError, match="tolerance_m=0"):
        make_sim(tolerance_m=0)


def test_read_reports_radians_and_the_tip_lands_where_the_link_lengths_say():
    sim, g = make_sim(), ArmGeometry()
    for q, tip in (
        ([0, 0, 0, 0], (0, 0, g.base_height + sum(g.lengths))),
        ([0, math.pi / 2, 0, 0], (g.reach, 0, g.base_height + g.lengths[0])),
        ([math.pi / 2, math.pi / 2, 0, 0], (0, g.reach, g.base_height + g.lengths[0])),
    ):
        sim.reset(q0=q)
        s = sim.read()
        assert np.allclose(s.pos, q) and np.allclose(s.vel, 0) and s.pos.dtype == np.float64
        assert np.allclose(sim.ee, tip, atol=1e-9)


def test_state_is_reused_and_commands_are_copied():
    sim = make_sim()
    s1 = sim.read()
    before = s1.pos.copy()
    cmd = Command.zeros(4)
    cmd.value[:] = [1.0, -2.0, 0.5, 0.1]
    sim.write(cmd)
    cmd.value[:] = 0.0  # the caller reuses its arrays
    for _ in range(20):
        sim.step()
    s2 = sim.read()
    assert s2 is s1 and s2.t_ns == 20_000_000
    assert not np.allclose(s2.pos, before)  # the torques were applied, not the zeroed array
    assert list(sim.data.ctrl) == [1.0, -2.0, 0.5, 0.1]


def test_gravity_is_the_static_torque_in_newton_metres():
    sim, g = make_sim(), ArmGeometry()
    sim.reset(q0=[0, math.pi / 2, 0, 0])  # stretched out horizontally
    out = np.zeros(4)
    sim.gravity(sim.read(), out)
    m, length = g.masses, g.lengths
    # each link's centre of mass: its capsule's middle, past the joints before it
    arm = (
        m[1] * length[1] / 2
        + m[2] * (length[1] + length[2] / 2)
        + m[3] * (length[1] + length[2] + length[3] / 2)
    )
    assert out[1] == pytest.approx(-G * arm, rel=1e-3) and out[0] == pytest.approx(0, abs=1e-9)
    assert out[3] == pytest.approx(-G * m[3] * length[3] / 2, rel=1e-3)


@pytest.mark.parametrize("q0", [None, [0.5, 1.2, 0.4, -0.6], [-1.0, 0.8, 2.0, 1.5]])
def test_gravity_hook_alone_holds_the_arm_still_and_without_it_the_arm_falls(q0):
    def drift(compensate: bool) -> float:
        sim = make_sim()
        sim.reset(q0=q0)
        start, cmd = sim.read().pos.copy(), Command.zeros(4)
        for _ in range(1000):  # 1 s, zero feedback: effort = gravity only
            s = sim.read()
            if compensate:
                sim.gravity(s, cmd.value)
            sim.write(cmd)
            sim.step()
        return float(np.abs(sim.read().pos - start).max())

    assert drift(True) < 2e-3  # rad after 1 s
    assert drift(False) > 0.05


def test_ready_pose_is_inside_the_workspace_with_the_hand_above_the_table():
    sim = make_sim()
    q = ready_pose(CONTROL)
    assert all(a.workspace[0] <= v <= a.workspace[1] for a, v in zip(CONTROL.axes, q))
    assert sim.ee[2] > 0.1


def test_target_is_reached_only_after_an_unbroken_dwell_inside_the_tolerance():
    from examples.arm_reach.task import ReachTask

    t = ReachTask(ReachConfig(seed=0, dwell_s=0.3, tolerance_m=0.02, timeout_s=4.0))
    t.start(0)
    tx, ty, tz = t.target
    ms = 1_000_000
    assert not t.update((tx + 0.019, ty, tz), 100 * ms)  # inside: dwell starts
    assert not t.update((tx + 0.021, ty, tz), 300 * ms)  # out: dwell broken
    assert not t.update((tx, ty, tz), 400 * ms)
    assert not t.update((tx, ty, tz), 699 * ms)
    assert t.update((tx, ty, tz), 700 * ms) and t.reached == 1
    assert t.reach_s == [pytest.approx(0.4)] and t.target_id == 1
    assert math.dist(t.target, (tx, ty, tz)) >= t.cfg.min_step_m
    assert t.update((9, 9, 9), 4700 * ms) and t.missed == 1  # timed out: missed, next one
    assert t.metrics()["success_rate"] == 0.5
