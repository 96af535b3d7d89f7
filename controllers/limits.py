"""Safety limits: the last step before a command reaches the drives.

Per axis: a workspace [low, high], a limit on the measured velocity, and the command limit
of its mode. What "cut back" means depends on the axis's command mode:
- effort: at or beyond a workspace bound, or above the velocity limit, the net effort
  pushing further out is removed, i.e. the command is cut back to the axis's `bias` (the
  effort that holds it still: its gravity feed-forward) in that direction, so a vertical
  axis neither drives on nor drops; |effort| is clipped to the effort limit.
- velocity: at or beyond a bound, or above the velocity limit, a command further out is
  cut to zero; |velocity| is clipped to the velocity limit.
- position: the command is clipped into the workspace; above the velocity limit the
  command becomes the measured position (stop where it is).
Every intervention is counted (per axis and tick) in `counters`. apply() runs every tick on
Python floats per axis (numpy's call overhead dominates on small vectors); the limit arrays
are read-only because apply() uses a cached copy. Not thread-safe; one per control loop.
"""

from __future__ import annotations

import numpy as np

from .config import ControlConfig

EFFORT, VELOCITY, POSITION = "effort", "velocity", "position"


def _floats(x, n: int) -> list[float]:
    if type(x) is np.ndarray and x.dtype == np.float64 and x.shape == (n,):
        return x.tolist()
    return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).tolist()


def _frozen(x, n: int) -> np.ndarray:
    a = np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()
    a.flags.writeable = False
    return a


class SafetyLimits:
    def __init__(self, cfg: ControlConfig):
        n = self.n = cfg.n
        self.modes = cfg.axis("mode")
        low, high = zip(*(a.workspace for a in cfg.axes))
        svel = [a.safety_vel_limit or 1.5 * a.vel_limit for a in cfg.axes]
        self.low, self.high, self.vel_limit = _frozen(low, n), _frozen(high, n), _frozen(svel, n)
        # the command's own limit: effort, velocity, or none (a position is clipped to the box)
        out = [
            a.effort_limit if m == EFFORT else v if m == VELOCITY else np.inf
            for a, m, v in zip(cfg.axes, self.modes, svel)
        ]
        self.out_limit = _frozen(out, n)
        self._axes = list(
            zip(
                self.modes,
                self.low.tolist(),
                self.high.tolist(),
                self.vel_limit.tolist(),
                self.out_limit.tolist(),
            )
        )
        self.counters = {
            "workspace_clamps": 0,
            "velocity_clamps": 0,
            "effort_clamps": 0,
            "waypoint_clamps": 0,
        }

    def clamp_waypoints(self, positions: np.ndarray) -> np.ndarray:
        """Clip target positions (..., n) into the workspace, in place; counts clipped values."""
        outside = (positions < self.low) | (positions > self.high)
        if outside.any():
            self.counters["waypoint_clamps"] += int(np.count_nonzero(outside))
            np.clip(positions, self.low, self.high, out=positions)
        return positions

    def apply(self, value: np.ndarray, pos, vel, bias) -> np.ndarray:
        """Limit the command `value` (n,) float64 in place for the measured pos, vel (n,);
        `bias` (n,): per effort axis the effort that holds it still. Returns `value`."""
        n = self.n
        p_, v_, b_ = _floats(pos, n), _floats(vel, n), _floats(bias, n)
        workspace = fast = big = 0
        for k, (f, (mode, low, high, vlim, olim)) in enumerate(zip(value.tolist(), self._axes)):
            f0, p, v = f, p_[k], v_[k]
            if mode == POSITION:
                if f > high or f < low:
                    workspace += 1
                    f = high if f > high else low
                if v > vlim or v < -vlim:
                    fast += 1
                    f = p
            else:
                rest = b_[k] if mode == EFFORT else 0.0
                if (f > rest and p >= high) or (f < rest and p <= low):
                    workspace += 1
                    f = rest
                if (f > rest and v > vlim) or (f < rest and v < -vlim):
                    fast += 1
                    f = rest
                if abs(f) > olim:
                    if mode == EFFORT:
                        big += 1
                    else:
                        fast += 1
                f = -olim if f < -olim else f  # np.clip's order: max(lo) first, then min(hi)
                f = olim if f > olim else f
            if f != f0:
                value[k] = f
        if workspace or fast or big:
            c = self.counters
            c["workspace_clamps"] += workspace
            c["velocity_clamps"] += fast
            c["effort_clamps"] += big
        return value
