"""The control stack for one tick: setpoint tracker -> PID (+ feed-forward) -> safety limits.

    stack = ControlStack(ControlConfig(...))
    stack.set_chunk(waypoints, capture_ns, period_ns, now_ns)   # at the policy rate
    cmd = stack.compute(state, now_ns)                          # every tick, 1 kHz
    stack.hold(now_ns)                                          # brake to a stop, keep suction

Axes are x, y, z (m, m/s, N); a waypoint row is (x, y, z, suction in [0, 1]). Not
thread-safe: call everything from the control loop thread.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from .hardware import Command, RobotState
from .limits import SafetyLimits
from .pid import PID
from .tracker import SetpointTracker

Vec3 = tuple[float, float, float]


@dataclass
class ControlConfig:
    """Gains and limits per axis (x, y, z). Defaults suit a ~2 kg gantry carriage; a cell
    should set its own. gravity_ff: constant force (N) added per axis, e.g. +m*g on z to
    carry the z carriage; it is also the 'no net force' level the safety limits cut to.
    mass_kg: acceleration feed-forward (N = kg * reference acceleration)."""
    rate_hz: float = 1000.0
    kp: Vec3 = (400.0, 400.0, 600.0)          # N/m
    ki: Vec3 = (200.0, 200.0, 300.0)          # N/(m s)
    kd: Vec3 = (60.0, 60.0, 60.0)             # N s/m
    kt: Vec3 | None = None                    # 1/s, back-calculation gain; None: ki/kp
    tau_d_s: float = 0.002                    # low-pass on measured velocity
    gravity_ff: Vec3 = (0.0, 0.0, 0.0)        # N
    mass_kg: Vec3 = (0.0, 0.0, 0.0)
    force_limit: Vec3 = (60.0, 60.0, 80.0)    # N, |force| per axis
    workspace_low: Vec3 = (-0.5, -0.5, 0.0)   # m
    workspace_high: Vec3 = (0.5, 0.5, 0.5)    # m
    vel_limit: Vec3 = (0.6, 0.6, 0.4)         # m/s, of the reference
    acc_limit: Vec3 = (3.0, 3.0, 3.0)         # m/s^2, of the reference
    safety_vel_limit: Vec3 | None = None      # m/s, measured; None: 1.5 * vel_limit
    hold_decel: Vec3 | None = None            # m/s^2 when holding; None: acc_limit
    blend_ns: int = 0                         # old -> new chunk blend window
    follow_per_s: float = 200.0               # 1/s, reference catch-up rate when off plan

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "ControlConfig":
        """From YAML/JSON data; unknown keys are an error (typos must not pass silently)."""
        names = {f.name for f in fields(cls)}
        if set(d) - names:
            raise ValueError(f"unknown control config keys {sorted(set(d) - names)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


class ControlStack:
    def __init__(self, cfg: ControlConfig):
        self.cfg = cfg
        self.dt_s = 1.0 / cfg.rate_hz
        flim = np.asarray(cfg.force_limit, float)
        self.tracker = SetpointTracker(cfg.vel_limit, cfg.acc_limit, blend_ns=cfg.blend_ns,
                                       hold_decel=cfg.hold_decel,
                                       follow_per_s=cfg.follow_per_s)
        self.pid = PID(cfg.kp, cfg.ki, cfg.kd, dt_s=self.dt_s, kt=cfg.kt, tau_d_s=cfg.tau_d_s,
                       out_min=-flim, out_max=flim)
        svel = cfg.safety_vel_limit or tuple(1.5 * v for v in cfg.vel_limit)
        self.limits = SafetyLimits(cfg.workspace_low, cfg.workspace_high, svel, flim,
                                   bias=cfg.gravity_ff)
        self._gravity = [float(g) for g in cfg.gravity_ff]
        self._mass = [float(m) for m in cfg.mass_kg]
        self._ff = np.zeros(3)
        self._pending: tuple | None = None  # a chunk that arrived before the first compute
        self._last_ns: int | None = None
        self.cmd = Command(np.zeros(3), False)

    @property
    def holding(self) -> bool:
        """True while braking or holding position (before the first chunk, after hold())."""
        return self.tracker.braking

    @property
    def counters(self) -> dict[str, int]:
        return self.limits.counters

    def set_chunk(self, waypoints: np.ndarray, capture_ns: int, period_ns: int, now_ns: int,
                  complete: bool = True, start_ns: int | None = None) -> None:
        """Track `waypoints` (n, 4), the first n of a chunk; waypoint i targets time
        capture_ns + start_ns + i * period_ns (start_ns None: one period). Positions are
        clipped into the workspace (counted as waypoint_clamps). Ends a hold.
        complete=False while more stream in."""
        w = np.array(waypoints, dtype=np.float64, ndmin=2)
        self.limits.clamp_waypoints(w[:, :3])
        if self.tracker.t_ns is None:
            self._pending = (w, capture_ns, period_ns, now_ns, complete, start_ns)
            return
        self.tracker.set_chunk(w, capture_ns, period_ns, now_ns, complete, start_ns)

    def hold(self, now_ns: int) -> None:
        """Decelerate the reference to a stop at hold_decel, then hold it; suction unchanged."""
        self._pending = None
        if self.tracker.t_ns is not None:
            self.tracker.brake(now_ns)

    def compute(self, state: RobotState, now_ns: int) -> Command:
        """One tick. Returns `self.cmd`, whose force array is reused by the next call:
        copy it if you keep it. The first call starts the reference at the robot's pose."""
        if self.tracker.t_ns is None:
            self.tracker.reset(state.pos, now_ns, state.suction)
            if self._pending is not None:
                w, capture_ns, period_ns, _, complete, start_ns = self._pending
                self.tracker.set_chunk(w, capture_ns, period_ns, now_ns, complete, start_ns)
                self._pending = None
        dt = self.dt_s if self._last_ns is None else (now_ns - self._last_ns) * 1e-9
        dt = min(max(dt, 1e-6), 10 * self.dt_s)  # a repeated or stalled tick must not blow up
        self._last_ns = now_ns
        pos, vel, acc = self.tracker.update(now_ns)
        # plain floats per axis: numpy's call overhead dwarfs 3-element maths at 1 kHz
        ff = self._ff
        for k, (m, a, g) in enumerate(zip(self._mass, acc.tolist(), self._gravity)):
            ff[k] = m * a + g
        self.pid.update(pos, state.pos, rate_setpoint=vel, measurement_rate=state.vel,
                        feedforward=ff, dt_s=dt)
        # The PID saturates at the same force limit (for its anti-windup); the limits take
        # the unsaturated output so every clamp is done, and counted, in one place.
        force = self.cmd.force
        force[0], force[1], force[2] = self.pid.u_raw.tolist()
        self.limits.apply(force, state.pos, state.vel)
        self.cmd.suction = self.tracker.suction
        return self.cmd
