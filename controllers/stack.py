"""The control stack for one tick: setpoint tracker -> per-mode law (+ feed-forward) -> limits.

    stack = ControlStack(ControlConfig.from_dict(robot_yaml["control"]), gravity=hw.gravity)
    stack.set_chunk(waypoints, capture_ns, period_ns, now_ns)   # at the policy rate
    cmd = stack.compute(state, now_ns)                          # every tick, e.g. 1 kHz
    stack.hold(now_ns)                                          # brake to a stop, keep the tool

A waypoint row is the axes in order, then the tool if the robot has one (controllers.config).
Per axis, the command mode decides the law (controllers.config's docstring): position axes
get the reference position, velocity axes the reference velocity plus PI position
correction, effort axes PID plus feed-forward (constant gravity, the hardware's gravity hook,
mass * reference acceleration). Not thread-safe: call everything from the control loop thread.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .config import ControlConfig
from .hardware import Command, RobotState
from .limits import EFFORT, POSITION, VELOCITY, SafetyLimits
from .pid import PID
from .tracker import SetpointTracker

Gravity = Callable[[RobotState, np.ndarray], None]
MAX_STEP_TICKS = 10  # a stalled tick moves the reference and the PID this many ticks at most


class ControlStack:
    def __init__(self, cfg: ControlConfig, gravity: Gravity | None = None):
        """gravity(state, out): the hardware's gravity-compensation hook (see
        controllers.hardware), called every tick when the robot has effort axes."""
        self.cfg = cfg
        n = self.n = cfg.n
        self.dt_s = 1.0 / cfg.rate_hz
        self.modes = cfg.axis("mode")
        self.tracker = SetpointTracker(
            cfg.axis("vel_limit"),
            cfg.axis("acc_limit"),
            n_axes=n,
            blend_ns=cfg.blend_ns,
            hold_decel=[a.hold_decel or a.acc_limit for a in cfg.axes],
            follow_per_s=cfg.follow_per_s,
            low=[a.workspace[0] for a in cfg.axes],
            high=[a.workspace[1] for a in cfg.axes],
            max_step_s=MAX_STEP_TICKS * self.dt_s,
        )
        self.limits = SafetyLimits(cfg)
        lim = self.limits.out_limit
        kt = [a.kt if a.kt is not None else (a.ki / a.kp if a.kp > 0 else 0.0) for a in cfg.axes]
        self.pid = PID(
            cfg.axis("kp"),
            cfg.axis("ki"),
            cfg.axis("kd"),
            dt_s=self.dt_s,
            n=n,
            kt=kt,
            tau_d_s=cfg.tau_d_s,
            out_min=-lim,
            out_max=lim,
        )
        self._gravity_hook = gravity if EFFORT in self.modes else None
        self._g = np.zeros(n)  # the hook's output, per axis
        self._gconst = list(cfg.axis("gravity"))
        self._mass = list(cfg.axis("mass"))
        self._ff = np.zeros(n)
        self._bias = np.zeros(n)  # effort that holds each effort axis still
        self._pending: tuple | None = None  # a chunk that arrived before the first compute
        self._last_ns: int | None = None
        self.cmd = Command.zeros(n)

    @property
    def holding(self) -> bool:
        """True while braking or holding position (before the first chunk, after hold())."""
        return self.tracker.braking

    @property
    def started(self) -> bool:
        """The first compute() has run: the reference starts at the robot's state."""
        return self.tracker.t_ns is not None

    @property
    def counters(self) -> dict[str, int]:
        return self.limits.counters

    def set_chunk(
        self,
        waypoints: np.ndarray,
        capture_ns: int,
        period_ns: int,
        now_ns: int,
        complete: bool = True,
        start_ns: int | None = None,
    ) -> None:
        """Track `waypoints` (m, dim), the first m of a chunk; waypoint i targets time
        capture_ns + start_ns + i * period_ns (start_ns None: one period). Positions are
        clipped into the workspace (counted as waypoint_clamps), tool values mapped by the
        tool's kind. Ends a hold. complete=False while more stream in."""
        w = np.array(waypoints, dtype=np.float64, ndmin=2)
        self.limits.clamp_waypoints(w[:, : self.n])
        self._map_tool(w)
        if self.tracker.t_ns is None:
            self._pending = (w, capture_ns, period_ns, now_ns, complete, start_ns)
            return
        self.tracker.set_chunk(w, capture_ns, period_ns, now_ns, complete, start_ns)

    def limited(self, waypoints: np.ndarray) -> np.ndarray:
        """`waypoints` as set_chunk tracks them, in a new array: positions clipped into the
        workspace, tool values mapped. Counts nothing (set_chunk counted the clips)."""
        w = np.array(waypoints, dtype=np.float64, ndmin=2)
        np.clip(w[:, : self.n], self.limits.low, self.limits.high, out=w[:, : self.n])
        self._map_tool(w)
        return w

    def _map_tool(self, w: np.ndarray) -> None:
        if self.cfg.tool is not None:
            w[:, self.n] = [self.cfg.tool.command(v) for v in w[:, self.n].tolist()]

    def hold(self, now_ns: int) -> None:
        """Decelerate the reference to a stop at hold_decel, then hold it; tool unchanged."""
        self._pending = None
        if self.tracker.t_ns is not None:
            self.tracker.brake(now_ns)

    def _start(self, state: RobotState, now_ns: int) -> None:
        """The first tick: the reference starts at rest where the robot is (a smooth start,
        never a jump to the first waypoint), then follows a chunk that came before."""
        self.tracker.reset(state.pos, now_ns, state.tool)
        if self._pending is not None:
            w, capture_ns, period_ns, _, complete, start_ns = self._pending
            self.tracker.set_chunk(w, capture_ns, period_ns, now_ns, complete, start_ns)
            self._pending = None

    def _feedforward(self, state: RobotState, vel: list[float], acc: list[float]) -> None:
        """self._ff: per axis, what the law adds before the limits (effort: gravity and
        mass x reference acceleration; velocity: the reference velocity, which the PI
        position correction is added to); self._bias: the effort that holds an effort axis
        still (its gravity)."""
        if self._gravity_hook is not None:
            self._gravity_hook(state, self._g)
        ff, bias = self._ff, self._bias
        for k, (mode, m, g, gh, v, a) in enumerate(
            zip(self.modes, self._mass, self._gconst, self._g.tolist(), vel, acc)
        ):
            if mode == EFFORT:
                bias[k] = g + gh
                ff[k] = m * a + g + gh
            else:
                ff[k] = v if mode == VELOCITY else 0.0

    def compute(self, state: RobotState, now_ns: int) -> Command:
        """One tick. Returns `self.cmd`, whose arrays are reused by the next call: copy what
        you keep. The first call starts the reference at the robot's state."""
        if self.tracker.t_ns is None:
            self._start(state, now_ns)
        dt = self.dt_s if self._last_ns is None else (now_ns - self._last_ns) * 1e-9
        dt = min(max(dt, 1e-6), MAX_STEP_TICKS * self.dt_s)  # a stalled tick must not blow up
        self._last_ns = now_ns
        pos, vel, acc = self.tracker.update(now_ns)
        self._feedforward(state, vel.tolist(), acc.tolist())
        self.pid.update(
            pos,
            state.pos,
            rate_setpoint=vel,
            measurement_rate=state.vel,
            feedforward=self._ff,
            dt_s=dt,
        )
        # The PID saturates at the same limit (for its anti-windup); the limits take the
        # unsaturated output so every clamp is done, and counted, in one place.
        cmd = self.cmd
        value = cmd.value
        value[:] = self.pid.u_raw
        for k, mode in enumerate(self.modes):
            if mode == POSITION:
                value[k] = pos[k]
        self.limits.apply(value, state.pos, state.vel, self._bias)
        cmd.ref_pos[:], cmd.ref_vel[:] = pos, vel
        cmd.tool = self.tracker.tool
        return cmd

    def safe_command(self, state: RobotState | None, now_ns: int) -> Command | None:
        """The command for a tick whose read failed (`state`: the last good one, None if
        none): the reference brakes as on hold; position axes get it, velocity axes 0,
        effort axes only their gravity bias (no feedback on a stale measurement). None
        before the first good read (nothing is known to command)."""
        if state is None or self.tracker.t_ns is None:
            return None
        self.hold(now_ns)
        pos, vel, acc = self.tracker.update(now_ns)
        self._feedforward(state, vel.tolist(), acc.tolist())
        cmd = self.cmd
        for k, mode in enumerate(self.modes):
            cmd.value[k] = (
                pos[k] if mode == POSITION else (self._bias[k] if mode == EFFORT else 0.0)
            )
        cmd.ref_pos[:], cmd.ref_vel[:] = pos, vel
        cmd.tool = self.tracker.tool
        return cmd
