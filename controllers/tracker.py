"""Setpoint tracker: a stream of waypoints -> a rate-limited position/velocity reference.

Waypoint i of a chunk targets time capture_ns + start_ns + i * period_ns (start_ns defaults
to one period: rtinfer's policies; 0 for a policy whose action 0 means "now"); waypoints
already due when the chunk arrives are skipped. Between knots the
plan is a monotone cubic Hermite spline (Fritsch-Butland tangents: no overshoot past a
waypoint, which matters for z near the belt). It is C1 (continuous velocity), so
accelerations are finite and, when the limits do not bind, the reference passes through
every waypoint exactly at its time. (Linear interpolation has a velocity step at every
waypoint, so an acceleration limit would always bind and the reference would lag;
min-jerk needs boundary accelerations the policy does not give.) Every new chunk
re-plans from the current reference state (knot 0 = now, position, velocity), so a
hand-over never jumps; an optional smoothstep blend from the old plan to the new one
lasts `blend_ns`, but never past the new chunk's first waypoint. A follower then
enforces per-axis velocity and acceleration limits on the reference itself: on plan it
samples the plan exactly, off plan it chases it along a braking curve.

The tool (a column after the axes, if the chunk has one) is discrete in time: a waypoint's
tool value (already mapped by the caller, controllers.config.ToolConfig.command) takes effect
when the reference time reaches the waypoint's time. Planning (per chunk) uses numpy; the
per-tick update works on Python floats per axis (numpy's call overhead dominates on
3-vectors). Not thread-safe; one instance per control loop.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from math import sqrt

import numpy as np

_SNAP = 0.05  # back "on the plan" when within this fraction of one tick's acceleration step


def _stop_speed(dist: float, amax: float, dt: float) -> float:
    """Fastest speed from which a stop within `dist` is possible at `amax`, counting the
    discrete steps (p += v * dt after v changes by at most amax * dt); ~sqrt(2 a d)."""
    return amax * (sqrt(2.25 * dt * dt + 2 * abs(dist) / amax) - 1.5 * dt)


def _hermite(plan, t: float):
    """Position and velocity lists of plan = (ts, ps, vs, tail) at t s after knot 0."""
    ts, ps, vs, tail = plan
    if t >= ts[-1]:
        return tail, [0.0] * len(tail)
    j = bisect_right(ts, t) - 1
    h = ts[j + 1] - ts[j]
    s = (t - ts[j]) / h
    s2, s3 = s * s, s * s * s
    a, b, c, d = 2 * s3 - 3 * s2 + 1, (s3 - 2 * s2 + s) * h, 3 * s2 - 2 * s3, (s3 - s2) * h
    da, db, dc = (6 * s2 - 6 * s) / h, 3 * s2 - 4 * s + 1, 3 * s2 - 2 * s
    p0, p1, v0, v1 = ps[j], ps[j + 1], vs[j], vs[j + 1]
    p = [a * p0[k] + b * v0[k] + c * p1[k] + d * v1[k] for k in range(len(p0))]
    v = [da * (p0[k] - p1[k]) + db * v0[k] + dc * v1[k] for k in range(len(p0))]
    return p, v


@dataclass(frozen=True)
class AxisLimits:
    """Per axis: velocity, acceleration and hold deceleration limits (read-only arrays), and
    the box the reference stays in; with the same as Python floats for the per-tick loop."""

    vmax: np.ndarray
    amax: np.ndarray
    decel: np.ndarray
    box: list  # (low, high) per axis
    vel_acc: list  # (vmax, amax) per axis, floats
    decel_f: list  # decel per axis, floats

    @classmethod
    def of(cls, n: int, vel_limit, acc_limit, decel, low, high) -> AxisLimits:
        """Each broadcast to n axes; every limit > 0 (else ValueError)."""

        def axes(v) -> np.ndarray:
            a = np.broadcast_to(np.asarray(v, float), (n,)).copy()
            a.flags.writeable = False  # cached as floats below
            return a

        vmax, amax, dec = axes(vel_limit), axes(acc_limit), axes(decel)
        if not ((vmax > 0).all() and (amax > 0).all() and (dec > 0).all()):
            raise ValueError("velocity, acceleration and hold deceleration limits must be > 0")
        return cls(
            vmax,
            amax,
            dec,
            list(zip(axes(low).tolist(), axes(high).tolist())),
            list(zip(vmax.tolist(), amax.tolist())),
            dec.tolist(),
        )


class SetpointTracker:
    """Limits are per axis (m/s, m/s^2). `follow_per_s`: rate (1/s) at which the reference
    closes a gap to the plan when it fell behind (a time constant of 1/follow_per_s).
    `hold_decel`: braking deceleration for `brake()` (defaults to acc_limit). `low`, `high`:
    per axis, the box the reference stays in: it brakes at acc_limit towards a bound it
    could otherwise not stop at, and a step that would still cross it ends on the bound at
    rest; a reference that started outside never moves further out. `max_step_s`: the most
    motion one update() integrates: after a stalled tick the reference does not leap ahead of
    a robot that stalled with it (it chases the plan from there, within the limits)."""

    def __init__(
        self,
        vel_limit,
        acc_limit,
        *,
        n_axes: int = 3,
        blend_ns: int = 0,
        hold_decel=None,
        follow_per_s: float = 200.0,
        low=-np.inf,
        high=np.inf,
        max_step_s: float = np.inf,
    ):
        self.n = n_axes
        self.max_step_s = float(max_step_s)
        # the limits, and the box the reference never leaves whatever the plan or the timing
        self.limits = AxisLimits.of(
            n_axes, vel_limit, acc_limit, acc_limit if hold_decel is None else hold_decel, low, high
        )
        self.blend_ns, self.follow_per_s = int(blend_ns), float(follow_per_s)
        self.t_ns: int | None = None  # reference time; None until reset()
        self.pos, self.vel, self.acc = np.zeros(n_axes), np.zeros(n_axes), np.zeros(n_axes)
        self.tool = 0.0
        self.braking = True  # no plan: brake to a stop, then hold position
        # (ts, ps, vs, tail) as lists of floats
        self._plan: tuple[list, list, list, list] | None = None
        self._old: tuple[list, list, list, list] | None = None
        self._t0_ns = self._old_t0_ns = 0
        self._blend = (0, 0)
        self._on = [False] * n_axes  # per axis: the reference sits exactly on the plan
        self._ev_t: list[int] = []  # pending tool switches (time ns, value)
        self._ev_val: list[float] = []
        self._ev_next = 0

    def reset(self, pos, now_ns: int, tool: float = 0.0) -> None:
        """Start at rest at `pos`, holding it, with the tool as it is."""
        self.t_ns, self.tool = int(now_ns), float(tool)
        self.pos[:], self.vel[:], self.acc[:] = pos, 0.0, 0.0
        self.brake(now_ns)

    def brake(self, now_ns: int) -> None:
        """Drop the plan and pending tool switches; decelerate at hold_decel to a stop."""
        self.update(now_ns)
        self.braking, self._plan, self._old = True, None, None
        self._ev_t, self._ev_val, self._ev_next = [], [], 0

    def set_chunk(
        self,
        waypoints: np.ndarray,
        capture_ns: int,
        period_ns: int,
        now_ns: int,
        complete: bool = True,
        start_ns: int | None = None,
    ) -> None:
        """Re-plan from the current reference through `waypoints` (n, n_axes), or (n,
        n_axes + 1) with the tool last, the first n waypoints of a chunk; complete=False while
        more are still streaming."""
        self.update(now_ns)
        w = np.asarray(waypoints, float)
        start = int(period_ns) if start_ns is None else int(start_ns)
        times = capture_ns + start + np.arange(len(w), dtype=np.int64) * int(period_ns)
        fut = times > now_ns
        ts = np.concatenate(([0.0], (times[fut] - now_ns) * 1e-9))
        ps = np.vstack((self.pos, w[fut, : self.n]))
        vs = np.empty_like(ps)
        vs[0] = self.vel
        if len(ts) > 2:  # Fritsch-Butland tangents: harmonic mean of the secants, 0 at extrema
            sec = np.diff(ps, axis=0) / np.diff(ts)[:, None]
            lo, hi = sec[:-1], sec[1:]
            same = lo * hi > 0
            vs[1:-1] = np.where(same, 2 * lo * hi / np.where(same, lo + hi, 1.0), 0.0)
        if len(ts) > 1:  # a finished chunk ends at rest; a streaming one keeps its slope
            vs[-1] = 0.0 if complete else (ps[-1] - ps[-2]) / (ts[-1] - ts[-2])
        if self._plan is not None and self.blend_ns > 0:
            end = (
                now_ns + self.blend_ns
                if len(ts) == 1
                else min(now_ns + self.blend_ns, int(times[fut][0]))
            )
            self._old, self._old_t0_ns, self._blend = self._plan, self._t0_ns, (now_ns, end)
        else:
            self._old, self._on = None, [True] * self.n
        self._plan = (ts.tolist(), ps.tolist(), vs.tolist(), w[-1, : self.n].tolist())
        self._t0_ns = int(now_ns)
        tool = w.shape[1] > self.n
        self._ev_t = times.tolist() if tool else []
        self._ev_val, self._ev_next = w[:, self.n].tolist() if tool else [], 0
        self.braking = False
        self._switch_tool(now_ns)

    def _switch_tool(self, now_ns: int) -> None:
        while self._ev_next < len(self._ev_t) and self._ev_t[self._ev_next] <= now_ns:
            self.tool = self._ev_val[self._ev_next]
            self._ev_next += 1

    def _desired(self, now_ns: int) -> tuple[list, list]:
        assert self._plan is not None  # only while a plan is followed
        p, v = _hermite(self._plan, (now_ns - self._t0_ns) * 1e-9)
        b0, b1 = self._blend
        if self._old is None or now_ns >= b1:
            self._old = None
            return p, v
        po, vo = _hermite(self._old, (now_ns - self._old_t0_ns) * 1e-9)
        x, span = (now_ns - b0) / (b1 - b0), (b1 - b0) * 1e-9
        s, ds = x * x * (3 - 2 * x), 6 * x * (1 - x) / span  # smoothstep and its rate
        return (
            [po[k] + s * (p[k] - po[k]) for k in range(self.n)],
            [vo[k] + s * (v[k] - vo[k]) + ds * (p[k] - po[k]) for k in range(self.n)],
        )

    def update(self, now_ns: int):
        """Advance the reference to now_ns; returns (pos, vel, acc), arrays reused."""
        if self.t_ns is None:
            raise RuntimeError("SetpointTracker.update before reset(pos, now_ns)")
        if self._ev_next < len(self._ev_t):
            self._switch_tool(now_ns)
        dt = min((now_ns - self.t_ns) * 1e-9, self.max_step_s)
        if dt <= 0:
            return self.pos, self.vel, self.acc
        self.t_ns = int(now_ns)
        P, V, A = self.pos, self.vel, self.acc
        if self.braking:
            limits = self.limits
            for k, (p0, v0, dec, (lo, hi)) in enumerate(
                zip(P.tolist(), V.tolist(), limits.decel_f, limits.box)
            ):
                lim = dec * dt  # v -= clip(v, -lim, lim): one step of braking towards 0
                v = v0 - (-lim if v0 < -lim else (lim if v0 > lim else v0))
                p = p0 + 0.5 * (v0 + v) * dt
                if (p > hi and p > p0) or (p < lo and p < p0):  # the box wins over the decel
                    p, v = (max(hi, p0) if p > hi else min(lo, p0)), 0.0
                P[k], V[k], A[k] = p, v, (v - v0) / dt
        else:
            self._follow(*self._desired(now_ns), dt)
        return P, V, A

    def _follow(self, pd: list, vd: list, dt: float) -> None:
        assert self._plan is not None  # only while a plan is followed
        P, V, A, tail, on = self.pos, self.vel, self.acc, self._plan[3], self._on
        k_follow = min(self.follow_per_s, 0.5 / dt)  # keeps the discrete catch-up loop stable
        lim = self.limits
        for k, (p0, v0, (vmax, amax), (blo, bhi)) in enumerate(
            zip(P.tolist(), V.tolist(), lim.vel_acc, lim.box)
        ):
            pdk, vdk, tk = pd[k], vd[k], tail[k]
            adt, vdt = amax * dt, vmax * dt
            # Stopping rule: never faster towards the plan's final rest point, nor towards a
            # bound of the box, than a stop at amax allows, so an infeasible plan is overshot
            # at intermediate points at most, and never out of the box.
            dd = tk - pdk
            room = bhi - pdk if vdk > 0 else pdk - blo
            stoppable = (
                (vdk * dd <= 0 or vdk * vdk <= 2 * amax * abs(dd) + adt * adt)
                and blo <= pdk <= bhi
                and vdk * vdk <= 2 * amax * room + adt * adt
            )
            exact = (
                on[k]
                and stoppable
                and abs(vdk) <= vmax
                and abs(pdk - p0) <= vdt
                and abs(vdk - v0) <= adt
            )
            if exact:
                p, v = pdk, vdk
            else:
                e = pdk - p0
                sign = 1.0 if e > 0 else (-1.0 if e < 0 else 0.0)
                vc = vdk + sign * min(k_follow * abs(e), _stop_speed(e, amax, dt))
                d = tk - p0
                cap = min(_stop_speed(d, amax, dt), vmax)
                lo, hi = (-vmax, cap) if d > 0 else (-cap, vmax)
                # and a stop before either bound (within `far` of it vmax can stop anyway)
                up, down, far = bhi - p0, p0 - blo, vmax * (vmax / (2 * amax) + 1.5 * dt)
                if up < far:
                    hi = min(hi, _stop_speed(up, amax, dt)) if up > 0 else min(hi, 0.0)
                if down < far:
                    lo = max(lo, -_stop_speed(down, amax, dt)) if down > 0 else max(lo, 0.0)
                vc = lo if vc < lo else vc
                vc = hi if vc > hi else vc
                dv = vc - v0
                dv = -adt if dv < -adt else dv
                dv = adt if dv > adt else dv
                v = v0 + dv
                p = p0 + v * dt
                if (p > bhi and p > p0) or (p < blo and p < p0):  # a step too long to brake
                    p, v = (max(bhi, p0) if p > bhi else min(blo, p0)), 0.0
            step = _SNAP * amax * dt
            on[k] = exact or (abs(p - pdk) <= step * dt and abs(v - vdk) <= step)
            P[k], V[k], A[k] = p, v, (v - v0) / dt
