"""ArmSim: the MuJoCo reach arm behind controllers.hardware.HardwareInterface.

`write()` sets the joint torques (N m; MuJoCo clips them to each motor's ctrlrange, the
axis's effort_limit), `step()` advances the physics by one control period (1 ms) and scores
the task, `read()` returns the joint angles (rad) and velocities (rad/s) at the current sim
time. `gravity(state, out)` fills the torques that hold the arm still at `state.pos`: MuJoCo's
bias force at zero velocity (mj_rne on a private MjData, so it never disturbs the physics).

Run by controllers.run (`--hardware examples.arm_reach.sim:ArmSim`), `advance` drives the
world from the controller's loop: the world stands still (observations still go out) until
the controller follows the first chunk or `wait_s` passes, then runs `seconds` of sim time
(or until `targets` are resolved) and ends the run. `observe` returns an observation every
1/obs_hz s, stamped `capture` with the loop's clock; the controller publishes it as `obs`.
Not thread-safe: one loop drives a sim.
"""

from __future__ import annotations

import mujoco
import numpy as np

from controllers.config import ControlConfig
from controllers.hardware import Command, Observation, RobotState

from .observe import obs_body, observe
from .scene import ArmGeometry, build_mjcf
from .task import ReachConfig, ReachTask

NS_PER_STEP = 1_000_000


class ArmSim:
    def __init__(self, control: ControlConfig, **hardware):
        """control: the robot's axes (one effort-mode joint each); hardware: ReachConfig
        fields (robot.yaml's `hardware:`). ValueError, one line, for a config that does not
        fit the arm or an unknown key."""
        if control.rate_hz != 1000:
            raise ValueError(
                f"the reach arm's physics steps 1 ms per tick; set control "
                f"rate_hz: 1000 (got {control.rate_hz:g})"
            )
        self.control, self.cfg = control, ReachConfig.from_dict(hardware)
        self.geom = ArmGeometry()
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(control, self.geom))
        self.data = mujoco.MjData(self.model)
        self._gdata = mujoco.MjData(self.model)  # gravity(): never touches the physics
        n = self.n = control.n
        self._state = RobotState.zeros(n)
        self._qpos, self._qvel, self._ctrl = (
            self.data.qpos[:n],
            self.data.qvel[:n],
            self.data.ctrl[:n],
        )
        self._ee = self.data.site("ee").xpos
        self._gq, self._gv = self._gdata.qpos[:n], self._gdata.qvel[:n]
        self._bias = np.zeros(self.model.nv)
        self.reset()

    # -- episode -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None, q0=None) -> None:
        """Arm at rest at q0 (default: the ready pose), new target sequence, score zeroed."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[: self.n] = ready_pose(self.control) if q0 is None else q0
        mujoco.mj_forward(self.model, self.data)
        cfg = (
            self.cfg
            if seed is None
            else ReachConfig.from_dict({**self.cfg.to_dict(), "seed": seed})
        )
        self.task = ReachTask(cfg)
        self.task.start(0)
        self._show_target()
        self.step_count = 0
        self._obs_every = max(1, round(1000.0 / self.cfg.obs_hz))
        self.frozen, self._end_step, self._wait_until_ns = True, None, None
        self._ticks = 0

    @property
    def t_ns(self) -> int:
        """Simulated time since reset (ns)."""
        return self.step_count * NS_PER_STEP

    @property
    def qpos(self) -> np.ndarray:
        """Joint angles (rad), a live view of the physics state."""
        return self._qpos

    @property
    def qvel(self) -> np.ndarray:
        """Joint velocities (rad/s), a live view."""
        return self._qvel

    @property
    def ee(self) -> np.ndarray:
        """End-effector (hand tip) position (m, world = table frame), a live view."""
        return self._ee

    def _show_target(self) -> None:
        self.data.mocap_pos[0] = self.task.target

    # -- HardwareInterface -------------------------------------------------------------------
    def read(self) -> RobotState:
        """Joint state now. The returned object is reused (updated in place) by the next read()."""
        s = self._state
        s.t_ns = self.step_count * NS_PER_STEP
        s.pos[:] = self._qpos
        s.vel[:] = self._qvel
        return s

    def write(self, cmd: Command) -> None:
        """Joint torques (N m) from cmd.value; the arm has no tool (cmd.tool is ignored)."""
        self._ctrl[:] = cmd.value

    def gravity(self, state: RobotState, out: np.ndarray) -> None:
        """out[:] = the joint torques (N m) that hold the arm still at state.pos."""
        g = self._gdata
        self._gq[:] = state.pos
        self._gv[:] = 0.0
        mujoco.mj_kinematics(self.model, g)
        mujoco.mj_comPos(self.model, g)
        mujoco.mj_rne(self.model, g, 0, self._bias)
        out[:] = self._bias[: self.n]

    def step(self) -> None:
        """Advance one control period (1 ms), then score the end effector."""
        mujoco.mj_step(self.model, self.data)
        self.step_count += 1
        if self.task.update(self._ee.tolist(), self.t_ns):
            self._show_target()

    # -- in the controller's loop --------------------------------------------------------------
    def observe(self, state: RobotState, now_ns: int) -> Observation | None:
        """Every 1/obs_hz s of the loop (frozen: of its ticks), the arm and the target."""
        self._ticks += 1
        if self._ticks % self._obs_every:
            return None
        body = obs_body(observe(self), self.task.target_id)
        return Observation(now_ns, body["values"], body["ints"])

    def advance(self, now_ns: int, following: bool) -> bool:
        """After every write: wait for the policy (world frozen), else step; True when the
        episode is over (`seconds` of sim time, or `targets` resolved)."""
        if self.frozen:
            if self._wait_until_ns is None:
                self._wait_until_ns = now_ns + int(self.cfg.wait_s * 1e9)
            if not following and now_ns < self._wait_until_ns:
                return False
            self.frozen = False
            if self.cfg.seconds is not None:
                self._end_step = self.step_count + round(self.cfg.seconds * 1000)
        self.step()
        done_targets = self.cfg.targets is not None and self.task.resolved >= self.cfg.targets
        return done_targets or (self._end_step is not None and self.step_count >= self._end_step)

    def report(self) -> dict:
        """The task's score and the sim's counts, for the run's final report."""
        return {"task": self.task.metrics(), "sim_s": self.t_ns / 1e9, "target_seed": self.cfg.seed}

    def close(self) -> None:
        pass


def ready_pose(control: ControlConfig) -> np.ndarray:
    """The arm's rest pose (rad): forearm forward, hand pointing at the table, clipped to the
    axes' workspaces."""
    q = np.array([0.0, 0.3, 1.6, 1.0][: control.n] + [0.0] * max(0, control.n - 4))
    lo, hi = zip(*(a.workspace for a in control.axes))
    return np.clip(q, lo, hi)
