"""Safety limits: the last step before a command reaches the motors.

Per axis: a workspace box, a velocity limit and a force limit. `bias` is the force that
gives zero net force at rest (gravity compensation on z): at or beyond a workspace bound,
or above the velocity limit, the net force pushing further out is removed, i.e. the
command is cut back to `bias` in that direction, so the z carriage neither drives on
nor drops. Every intervention is counted (per axis and tick) in `counters`.
Not thread-safe; one instance per control loop.
"""
from __future__ import annotations

import numpy as np


class SafetyLimits:
    def __init__(self, low, high, vel_limit, force_limit, *, bias=0.0, n: int = 3):
        def arr(x):
            return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()
        self.low, self.high = arr(low), arr(high)
        self.vel_limit, self.force_limit, self.bias = arr(vel_limit), arr(force_limit), arr(bias)
        if not (self.low < self.high).all():
            raise ValueError(f"workspace needs low < high per axis, got {self.low} {self.high}")
        self.counters = {"workspace_clamps": 0, "velocity_clamps": 0, "force_clamps": 0,
                         "waypoint_clamps": 0}

    def clamp_waypoints(self, positions: np.ndarray) -> np.ndarray:
        """Clip target positions (..., n) into the workspace, in place; counts clipped values."""
        outside = (positions < self.low) | (positions > self.high)
        if outside.any():
            self.counters["waypoint_clamps"] += int(np.count_nonzero(outside))
            np.clip(positions, self.low, self.high, out=positions)
        return positions

    def apply(self, force: np.ndarray, pos: np.ndarray, vel: np.ndarray) -> np.ndarray:
        """Limit `force` (n,) in place for the measured pos, vel; returns it."""
        c = self.counters
        out_hi = (force > self.bias) & (pos >= self.high)
        out_lo = (force < self.bias) & (pos <= self.low)
        if out_hi.any() or out_lo.any():
            c["workspace_clamps"] += int(np.count_nonzero(out_hi | out_lo))
            force[out_hi | out_lo] = self.bias[out_hi | out_lo]
        fast_hi = (force > self.bias) & (vel > self.vel_limit)
        fast_lo = (force < self.bias) & (vel < -self.vel_limit)
        if fast_hi.any() or fast_lo.any():
            c["velocity_clamps"] += int(np.count_nonzero(fast_hi | fast_lo))
            force[fast_hi | fast_lo] = self.bias[fast_hi | fast_lo]
        big = np.abs(force) > self.force_limit
        if big.any():
            c["force_clamps"] += int(np.count_nonzero(big))
            np.clip(force, -self.force_limit, self.force_limit, out=force)
        return force
