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

The gains and limits are one frozen `PIDGains` (read-only arrays), replaced whole by
set_gains(). The arrays (i, rate, e, u, ...) are the state; update() does its arithmetic on
Python floats per axis, because numpy's per-call overhead dwarfs the maths on 3-vectors at
1 kHz.

Checked at construction and on every set_gains (ValueError naming the axis and the fix):
kt * dt < 1 (a larger tracking step overshoots the saturation it should track), and a
defaulted kt = ki / kp needs kp > 0 wherever ki != 0 (kp <= 0 would silently mean kt = 0: no
back-calculation at all); pass kt explicitly there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

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


@dataclass(frozen=True)
class PIDGains:
    """The gains (kp, ki, kd, tracking kt; 1/s for ki and kt) and the output and integral
    limits (output units), each a read-only per-axis array. kt_follows: kt was defaulted to
    ki / kp and is derived again when they change."""

    kp: np.ndarray
    ki: np.ndarray
    kd: np.ndarray
    kt: np.ndarray
    out_min: np.ndarray
    out_max: np.ndarray
    i_min: np.ndarray
    i_max: np.ndarray
    kt_follows: bool

    @classmethod
    def of(
        cls, n: int, kp, ki, kd, kt=None, out_min=-np.inf, out_max=np.inf, i_min=None, i_max=None
    ) -> PIDGains:
        """Scalars or per-axis values, broadcast to n axes; i_min/i_max default to the output
        limits. Raises ValueError on a defaulted kt that cannot be derived (see the module)."""
        lo, hi = _arr(out_min, n), _arr(out_max, n)
        g = cls(
            _arr(kp, n),
            _arr(ki, n),
            _arr(kd, n),
            _arr(0.0 if kt is None else kt, n),
            lo,
            hi,
            lo if i_min is None else _arr(i_min, n),
            hi if i_max is None else _arr(i_max, n),
            kt is None,
        )
        return g.with_gains()

    def with_gains(self, kp=None, ki=None, kd=None, kt=None) -> PIDGains:
        """A copy with the gains given changed (limits kept); a following kt is derived again
        from kp and ki, a kt given stops following them."""
        n = len(self.kp)
        new: dict[str, Any] = {
            k: _arr(v, n)
            for k, v in (("kp", kp), ("ki", ki), ("kd", kd), ("kt", kt))
            if v is not None
        }
        g = replace(self, **new)
        if kt is not None:
            return replace(g, kt_follows=False)
        if not g.kt_follows:
            return g
        bad = np.flatnonzero((g.kp <= 0) & (g.ki != 0))
        if bad.size:
            raise ValueError(
                f"PID axis {int(bad[0])}: kt defaults to ki / kp, but kp = "
                f"{g.kp[bad[0]]:g} <= 0 with ki = {g.ki[bad[0]]:g} would "
                f"mean no anti-windup back-calculation; pass kt explicitly"
            )
        return replace(g, kt=_arr(np.divide(g.ki, g.kp, out=np.zeros(n), where=g.kp > 0), n))

    def check(self, dt_s: float) -> None:
        """ValueError unless 0 <= kt * dt_s < 1 on every axis."""
        bad = np.flatnonzero((self.kt * dt_s >= 1) | (self.kt < 0))
        if bad.size:
            k = int(bad[0])
            raise ValueError(
                f"PID axis {k}: kt = {self.kt[k]:g}/s with dt = {dt_s:g} s "
                f"gives kt * dt = {self.kt[k] * dt_s:g}; it must be in "
                f"[0, 1): lower kt (or ki / kp) or the period"
            )

    def rows(self) -> list[tuple[float, ...]]:
        """Per axis (kp, ki, kd, kt, out_min, out_max, i_min, i_max) as Python floats."""
        return list(
            zip(
                self.kp.tolist(),
                self.ki.tolist(),
                self.kd.tolist(),
                self.kt.tolist(),
                self.out_min.tolist(),
                self.out_max.tolist(),
                self.i_min.tolist(),
                self.i_max.tolist(),
            )
        )


class PID:
    def __init__(
        self,
        kp,
        ki,
        kd,
        *,
        dt_s: float,
        n: int = 3,
        kt=None,
        tau_d_s: float = 0.0,
        out_min=-np.inf,
        out_max=np.inf,
        i_min=None,
        i_max=None,
    ):
        """Gains per axis. kt defaults to ki / kp (tracking time = integral time Ti),
        a common choice, and then follows kp and ki through set_gains; kt * dt_s must stay
        below 1. i_min/i_max default to the output limits. tau_d_s: time constant (s) of
        the low-pass on the measured rate."""
        self.n, self.dt_s, self.tau_d_s = n, float(dt_s), float(tau_d_s)
        self.gains = PIDGains.of(n, kp, ki, kd, kt, out_min, out_max, i_min, i_max)
        self.gains.check(self.dt_s)
        self._rows = self.gains.rows()  # update()'s per-axis floats
        self.i = np.zeros(n)  # integral term, output units
        self.rate = np.zeros(n)  # filtered measured rate
        self.e = np.zeros(n)  # last error, kept for bumpless gain changes
        self.d_err = np.zeros(n)  # last rate error (rate_setpoint - rate)
        self.ff = np.zeros(n)
        self.u_raw = np.zeros(n)  # last unsaturated output
        self.u = np.zeros(n)  # last output (returned array, reused)
        self._prev_meas = np.zeros(n)
        self._primed = False

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
        g = self.gains.with_gains(kp, ki, kd, kt)
        g.check(self.dt_s)
        self.gains, self._rows = g, g.rows()
        if self._primed:  # the applied (saturated) output u is what must not jump
            self.i[:] = self.u - g.kp * self.e - g.kd * self.d_err - self.ff
            np.clip(self.i, g.i_min, g.i_max, out=self.i)

    def update(
        self,
        setpoint,
        measurement,
        *,
        rate_setpoint=0.0,
        measurement_rate=None,
        feedforward=0.0,
        dt_s: float | None = None,
    ) -> np.ndarray:
        """Return the output (per axis, in output units). The returned array is reused by
        the next call. measurement_rate: a measured velocity, used instead of differencing
        the measurement (both go through the low-pass)."""
        n, dt = self.n, self.dt_s if dt_s is None else dt_s
        sp, meas = _floats(setpoint, n), _floats(measurement, n)
        rsp, ffs = _floats(rate_setpoint, n), _floats(feedforward, n)
        mrate = None if measurement_rate is None else _floats(measurement_rate, n)
        primed = self._primed
        alpha = 1.0 if not primed else dt / (self.tau_d_s + dt)
        I, R, E, D, F, UR, U, M = (
            self.i,
            self.rate,
            self.e,
            self.d_err,
            self.ff,
            self.u_raw,
            self.u,
            self._prev_meas,
        )
        i_, rate_, prev_ = I.tolist(), R.tolist(), M.tolist()
        for k, (kp, ki, kd, kt, omin, omax, imin, imax) in enumerate(self._rows):
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
