"""PID with feed-forward, anti-windup and a filtered derivative on measurement.

Per axis: every gain and limit is a per-axis array (scalars broadcast).
Discrete form, per update with period dt (s), error e = setpoint - measurement:
    i      = clip(i + dt * ki * e, i_min, i_max)  (integral kept in output units)
    d      = kd * (rate_setpoint - lowpass(d measurement / dt))
    u_raw  = kp * e + i + d + feedforward
    u      = clip(u_raw, out_min, out_max)
    i     += dt * kt * (u - u_raw)             (back-calculation, tracking gain kt)
    i      = clip(i, i_min, i_max)             (clamping, again)
The derivative acts on the measurement (plus an optional smooth rate setpoint), so a
setpoint step gives no derivative kick. Not thread-safe; one instance per loop.

The arrays (i, rate, e, u, ...) are the state; update() does its arithmetic on Python
floats per axis, because numpy's per-call overhead dwarfs the maths on 3-vectors at 1 kHz.
Gain and limit arrays are read-only: change gains with set_gains().

Checked at construction and on every set_gains (ValueError naming the axis and the fix):
kt * dt < 1 (a larger tracking step overshoots the saturation it should track), and a
defaulted kt = ki / kp needs kp > 0 wherever ki != 0 (kp <= 0 would silently mean kt = 0: no
back-calculation at all); pass kt explicitly there.
"""
from __future__ import annotations

import numpy as np


def _arr(x, n: int) -> np.ndarray:
    a = np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()
    a.flags.writeable = False  # update() uses a cached copy: in-place edits would be lost
    return a


def _floats(x, n: int) -> list[float]:
    """x (scalar, sequence or array, broadcast to n) as a list of n Python floats."""
    if type(x) is np.ndarray and x.dtype == np.float64 and x.shape == (n,):
        return x.tolist()
    if type(x) is float:
        return [x] * n
    return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).tolist()


class PID:
    def __init__(self, kp, ki, kd, *, dt_s: float, n: int = 3, kt=None, tau_d_s: float = 0.0,
                 out_min=-np.inf, out_max=np.inf, i_min=None, i_max=None):
        """Gains per axis. kt defaults to ki / kp (tracking time = integral time Ti),
        a common choice, and then follows kp and ki through set_gains; kt * dt_s must stay
        below 1. i_min/i_max default to the output limits. tau_d_s: time constant (s) of
        the low-pass on the measured rate."""
        self.n, self.dt_s, self.tau_d_s = n, float(dt_s), float(tau_d_s)
        self.kp, self.ki, self.kd = _arr(kp, n), _arr(ki, n), _arr(kd, n)
        self._kt_default = kt is None  # kt = ki / kp, re-derived when kp or ki change
        self.kt = self._derived_kt() if kt is None else _arr(kt, n)
        self._check_kt()
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
        self._cache_gains()

    def _derived_kt(self) -> np.ndarray:
        bad = np.flatnonzero((self.kp <= 0) & (self.ki != 0))
        if bad.size:
            raise ValueError(f"PID axis {int(bad[0])}: kt defaults to ki / kp, but kp = "
                             f"{self.kp[bad[0]]:g} <= 0 with ki = {self.ki[bad[0]]:g} would "
                             f"mean no anti-windup back-calculation; pass kt explicitly")
        return _arr(np.divide(self.ki, self.kp, out=np.zeros(self.n), where=self.kp > 0),
                    self.n)

    def _check_kt(self) -> None:
        bad = np.flatnonzero((self.kt * self.dt_s >= 1) | (self.kt < 0))
        if bad.size:
            k = int(bad[0])
            raise ValueError(f"PID axis {k}: kt = {self.kt[k]:g}/s with dt = {self.dt_s:g} s "
                             f"gives kt * dt = {self.kt[k] * self.dt_s:g}; it must be in "
                             f"[0, 1): lower kt (or ki / kp) or the period")

    def _cache_gains(self) -> None:
        self._gains = list(zip(self.kp.tolist(), self.ki.tolist(), self.kd.tolist(),
                               self.kt.tolist(), self.out_min.tolist(), self.out_max.tolist(),
                               self.i_min.tolist(), self.i_max.tolist()))

    def reset(self) -> None:
        for a in (self.i, self.rate, self.e, self.d_err, self.ff, self.u_raw, self.u):
            a.fill(0.0)
        self._primed = False

    def set_gains(self, kp=None, ki=None, kd=None, kt=None) -> None:
        """Bumpless transfer: the integral is re-solved so that the last output, evaluated
        with the new gains, is unchanged; the next output then moves only by what new
        errors ask for. The integral stays within [i_min, i_max]: where the re-solved one
        lies outside, the last output is kept as nearly as that allows (it moves by the
        excess). kt: a new tracking gain; a defaulted kt (ki / kp) is re-derived. Raises
        ValueError (nothing changed) on gains the checks above refuse."""
        old = (self.kp, self.ki, self.kd, self.kt)
        u_prev = self.u.copy()  # the applied (saturated) output is what must not jump
        for name, g in (("kp", kp), ("ki", ki), ("kd", kd)):
            if g is not None:
                setattr(self, name, _arr(g, self.n))
        try:
            if kt is not None:
                self.kt, self._kt_default = _arr(kt, self.n), False
            elif self._kt_default:
                self.kt = self._derived_kt()
            self._check_kt()
        except ValueError:
            self.kp, self.ki, self.kd, self.kt = old
            raise
        self._cache_gains()
        if self._primed:
            self.i[:] = u_prev - self.kp * self.e - self.kd * self.d_err - self.ff
            np.clip(self.i, self.i_min, self.i_max, out=self.i)

    def update(self, setpoint, measurement, *, rate_setpoint=0.0, measurement_rate=None,
               feedforward=0.0, dt_s: float | None = None) -> np.ndarray:
        """Return the output (per axis, in output units). The returned array is reused by
        the next call. measurement_rate: a measured velocity, used instead of differencing
        the measurement (both go through the low-pass)."""
        n, dt = self.n, self.dt_s if dt_s is None else dt_s
        sp, meas = _floats(setpoint, n), _floats(measurement, n)
        rsp, ffs = _floats(rate_setpoint, n), _floats(feedforward, n)
        mrate = None if measurement_rate is None else _floats(measurement_rate, n)
        primed = self._primed
        alpha = 1.0 if not primed else dt / (self.tau_d_s + dt)
        I, R, E, D, F, UR, U, M = (self.i, self.rate, self.e, self.d_err, self.ff, self.u_raw,
                                   self.u, self._prev_meas)
        i_, rate_, prev_ = I.tolist(), R.tolist(), M.tolist()
        for k, (kp, ki, kd, kt, omin, omax, imin, imax) in enumerate(self._gains):
            m = meas[k]
            if mrate is not None:
                raw = mrate[k]
            else:
                raw = (m - prev_[k]) / dt if primed else 0.0
            r = rate_[k]
            r = r + alpha * (raw - r)
            e = sp[k] - m
            d = rsp[k] - r
            ff = ffs[k]
            i = i_[k] + dt * ki * e
            i = imin if i < imin else i  # clip as np.clip does: max(lo) first, then min(hi)
            i = imax if i > imax else i
            u_raw = kp * e + i + kd * d + ff
            u = omin if u_raw < omin else u_raw
            u = omax if u > omax else u
            i = i + dt * kt * (u - u_raw)
            i = imin if i < imin else i
            i = imax if i > imax else i
            R[k], M[k], E[k], D[k], F[k], I[k], UR[k], U[k] = r, m, e, d, ff, i, u_raw, u
        self._primed = True
        return U
