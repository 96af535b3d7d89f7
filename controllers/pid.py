"""PID with feed-forward, anti-windup and a filtered derivative on measurement.

Vectorised over axes: every gain and limit is a per-axis array (scalars broadcast).
Discrete form, per update with period dt (s), error e = setpoint - measurement:
    i      = clip(i + dt * ki * e, i_min, i_max)  (integral kept in output units)
    d      = kd * (rate_setpoint - lowpass(d measurement / dt))
    u_raw  = kp * e + i + d + feedforward
    u      = clip(u_raw, out_min, out_max)
    i     += dt * kt * (u - u_raw)             (back-calculation, tracking gain kt)
    i      = clip(i, i_min, i_max)             (clamping, again)
The derivative acts on the measurement (plus an optional smooth rate setpoint), so a
setpoint step gives no derivative kick. Not thread-safe; one instance per loop.
"""
from __future__ import annotations

import numpy as np


def _arr(x, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()


class PID:
    def __init__(self, kp, ki, kd, *, dt_s: float, n: int = 3, kt=None, tau_d_s: float = 0.0,
                 out_min=-np.inf, out_max=np.inf, i_min=None, i_max=None):
        """Gains per axis. kt defaults to ki / kp (tracking time = integral time Ti),
        a common choice; kt * dt_s must stay below 1. i_min/i_max default to the output
        limits. tau_d_s: time constant (s) of the low-pass on the measured rate."""
        self.n, self.dt_s, self.tau_d_s = n, float(dt_s), float(tau_d_s)
        self.kp, self.ki, self.kd = _arr(kp, n), _arr(ki, n), _arr(kd, n)
        if kt is None:
            kt = np.divide(self.ki, self.kp, out=np.zeros(n), where=self.kp > 0)
        self.kt = _arr(kt, n)
        self.out_min, self.out_max = _arr(out_min, n), _arr(out_max, n)
        self.i_min = self.out_min.copy() if i_min is None else _arr(i_min, n)
        self.i_max = self.out_max.copy() if i_max is None else _arr(i_max, n)
        self.i = np.zeros(n)          # integral term, output units
        self.rate = np.zeros(n)       # filtered measured rate
        self.e = np.zeros(n)          # last error, kept for bumpless gain changes
        self.d_err = np.zeros(n)      # last rate error (rate_setpoint - rate)
        self.ff = np.zeros(n)
        self.u_raw = np.zeros(n)      # last unsaturated output
        self.u = np.zeros(n)          # last output (returned array, reused)
        self._prev_meas = np.zeros(n)
        self._primed = False

    def reset(self) -> None:
        for a in (self.i, self.rate, self.e, self.d_err, self.ff, self.u_raw, self.u):
            a.fill(0.0)
        self._primed = False

    def set_gains(self, kp=None, ki=None, kd=None) -> None:
        """Bumpless transfer: the integral is re-solved so that the last output, evaluated
        with the new gains, is unchanged; the next output then moves only by what new
        errors ask for."""
        u_prev = self.u.copy()  # the applied (saturated) output is what must not jump
        for name, g in (("kp", kp), ("ki", ki), ("kd", kd)):
            if g is not None:
                setattr(self, name, _arr(g, self.n))
        if self._primed:
            self.i[:] = u_prev - self.kp * self.e - self.kd * self.d_err - self.ff
            np.clip(self.i, self.i_min, self.i_max, out=self.i)

    def update(self, setpoint, measurement, *, rate_setpoint=0.0, measurement_rate=None,
               feedforward=0.0, dt_s: float | None = None) -> np.ndarray:
        """Return the output (N per axis for the gantry). The returned array is reused by
        the next call. measurement_rate: a measured velocity, used instead of differencing
        the measurement (both go through the low-pass)."""
        dt = self.dt_s if dt_s is None else dt_s
        meas = np.asarray(measurement, dtype=np.float64)
        if measurement_rate is None:
            raw_rate = (meas - self._prev_meas) / dt if self._primed else np.zeros(self.n)
        else:
            raw_rate = np.asarray(measurement_rate, dtype=np.float64)
        alpha = 1.0 if not self._primed else dt / (self.tau_d_s + dt)
        self.rate += alpha * (raw_rate - self.rate)
        self._prev_meas[:] = meas
        self._primed = True

        np.subtract(setpoint, meas, out=self.e)
        np.subtract(rate_setpoint, self.rate, out=self.d_err)
        self.ff[:] = feedforward
        self.i += dt * self.ki * self.e
        np.clip(self.i, self.i_min, self.i_max, out=self.i)
        self.u_raw[:] = self.kp * self.e + self.i + self.kd * self.d_err + self.ff
        np.clip(self.u_raw, self.out_min, self.out_max, out=self.u)
        self.i += dt * self.kt * (self.u - self.u_raw)
        np.clip(self.i, self.i_min, self.i_max, out=self.i)
        return self.u
