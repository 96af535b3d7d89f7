"""Safety limits: the last step before a command reaches the motors.

Per axis: a workspace box, a velocity limit and a force limit. `bias` is the force that
gives zero net force at rest (gravity compensation on z): at or beyond a workspace bound,
or above the velocity limit, the net force pushing further out is removed, i.e. the
command is cut back to `bias` in that direction, so the z carriage neither drives on
nor drops. Every intervention is counted (per axis and tick) in `counters`.
apply() runs every tick on Python floats per axis (numpy's call overhead dominates on
3-vectors); the limit arrays are read-only because apply() uses a cached copy.
Not thread-safe; one instance per control loop.
"""
from __future__ import annotations

import numpy as np


def _floats(x, n: int) -> list[float]:
    if type(x) is np.ndarray and x.dtype == np.float64 and x.shape == (n,):
        return x.tolist()
    return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).tolist()


class SafetyLimits:
    def __init__(self, low, high, vel_limit, force_limit, *, bias=0.0, n: int = 3):
        def arr(x):
            a = np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()
            a.flags.writeable = False
            return a
        self.n = n
        self.low, self.high = arr(low), arr(high)
        self.vel_limit, self.force_limit, self.bias = arr(vel_limit), arr(force_limit), arr(bias)
        if not (self.low < self.high).all():
            raise ValueError(f"workspace needs low < high per axis, got {self.low} {self.high}")
        self._axes = list(zip(self.low.tolist(), self.high.tolist(), self.vel_limit.tolist(),
                              self.force_limit.tolist(), self.bias.tolist()))
        self.counters = {"workspace_clamps": 0, "velocity_clamps": 0, "force_clamps": 0,
                         "waypoint_clamps": 0}

    def clamp_waypoints(self, positions: np.ndarray) -> np.ndarray:
        """Clip target positions (..., n) into the workspace, in place; counts clipped values."""
        outside = (positions < self.low) | (positions > self.high)
        if outside.any():
            self.counters["waypoint_clamps"] += int(np.count_nonzero(outside))
            np.clip(positions, self.low, self.high, out=positions)
        return positions

    def apply(self, force: np.ndarray, pos, vel) -> np.ndarray:
        """Limit `force` (n,) float64 in place for the measured pos, vel (n,); returns it."""
        n = self.n
        p_, v_ = _floats(pos, n), _floats(vel, n)
        workspace = fast = big = 0
        for k, (f, (low, high, vlim, flim, bias)) in enumerate(zip(force.tolist(), self._axes)):
            f0, p, v = f, p_[k], v_[k]
            if (f > bias and p >= high) or (f < bias and p <= low):
                workspace += 1
                f = bias
            if (f > bias and v > vlim) or (f < bias and v < -vlim):
                fast += 1
                f = bias
            if abs(f) > flim:
                big += 1
            f = -flim if f < -flim else f  # np.clip's order: max(lo) first, then min(hi)
            f = flim if f > flim else f
            if f != f0:
                force[k] = f
        if workspace or fast or big:
            c = self.counters
            c["workspace_clamps"] += workspace
            c["velocity_clamps"] += fast
            c["force_clamps"] += big
        return force
