"""ScriptedExpert: sorts by intercepting objects on the moving belt, from observations only.

Per call (one policy period) it plans a short kinematic rollout from the observed gantry
state toward a moving goal (per-axis speed/acceleration limits, braking curve) and samples
it at the chunk's waypoint times. Goals: pick - hover over the chosen object, following
its belt motion, descend once aligned with suction on; place - lift, carry to the bin
the instruction names for that class, release when settled over it. The chunk is
quantised through the policy's ActionTokenizer (encode -> decode), so the expert lives at
the token resolution a policy will. Run `python -m examples.conveyor_sorting.expert
--objects 200` to measure the success rate (prints JSON).
"""

from __future__ import annotations

import numpy as np

from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig

from .config import CellConfig

VMAX = np.array([1.0, 1.0, 0.7])  # m/s, inside the tracker's limits
AMAX = np.array([8.0, 8.0, 8.0])  # m/s^2
ROLLOUT_DT = 0.01  # s
ALIGN_M = 0.008  # xy error below which the cup descends
TRAVEL_DZ = 0.08  # approach height above the belt (m, cup bottom)
CARRY_Z = 0.50  # cup height while carrying
CLEAR_DZ = 0.12  # cup above belt before moving sideways with a load
WAIT_DX = 0.4  # idle over the belt this far downstream of its start


class ScriptedExpert:
    """Stateful (remembers its target); call reset() at each episode start. Not thread-safe."""

    def __init__(self, cell: CellConfig, tokenizer: TokenizerConfig):
        self.cell, self.tok = cell, ActionTokenizer(tokenizer)
        self.period_s = tokenizer.period_ns * 1e-9
        self.horizon = tokenizer.horizon
        self.top = np.array([cell.belt_top + 2 * c.half_height for c in cell.classes])
        self.x_limit = cell.belt_x[1] - 0.06  # last x at which a pick is still attempted
        self.reset()

    def reset(self) -> None:
        self.target: tuple[int, float, float] | None = None  # (class, x, y) at last obs
        self.carry: int | None = None  # class of the held object
        self.descending = False

    def act(self, obs: dict) -> np.ndarray:
        """(H, D) float32 chunk, already quantised to token bin centres."""
        return self.act_tokens(obs)[1]

    def act_tokens(self, obs: dict) -> tuple[np.ndarray, np.ndarray]:
        """(tokens int32 (H, D), values float32 (H, D)) for one observation."""
        tokens = self.tok.encode(self._plan(obs))
        return tokens, self.tok.decode(tokens)

    # -- planning ----------------------------------------------------------------------------
    def _plan(self, obs: dict) -> np.ndarray:
        g = np.asarray(obs["gantry"], np.float64)
        p, v, holding = g[:3], g[3:6], g[7] > 0.5
        if holding:
            if self.carry is None:
                held = int(np.asarray(obs.get("held", [-1])).reshape(-1)[0])
                if held >= 0:
                    self.carry = held
                else:
                    self.carry = self.target[0] if self.target else self._guess_class(p)
            return self._place(p, v, int(obs["instruction"][self.carry]))
        if self.carry is not None:  # released: start over
            self.carry = self.target = None
            self.descending = False
        objs = [tuple(r[:3]) for r in np.asarray(obs["objects"]) if r[3] > 0.5]
        self._track(objs)
        if self.target is None:
            self.target, self.descending = self._choose(p, objs), False
        if self.target is None:
            wait = np.array([self.cell.belt_x[0] + WAIT_DX, 0.0, self._travel_z()])
            return self._rollout(p, v, lambda t, q: (wait, np.zeros(3)), 0.0)
        return self._pick(p, v)

    def _travel_z(self) -> float:
        return self.cell.belt_top + TRAVEL_DZ

    def _track(self, objs) -> None:
        """Follow the target from the last observation: it moved one period along the belt."""
        if self.target is None:
            return
        c, x, y = self.target
        xp = x + self.cell.belt_speed * self.period_s
        near = [
            o for o in objs if int(o[0]) == c and abs(o[1] - xp) < 0.03 and abs(o[2] - y) < 0.03
        ]
        self.target = (c, *near[0][1:3]) if near and near[0][1] < self.x_limit else None

    def _choose(self, p, objs):
        """Most downstream object the gantry can still reach and pick before x_limit."""
        vb = self.cell.belt_speed
        ts = np.arange(0.0, 5.0, 0.05)
        for c, x, y in objs:  # observe.py lists the most downstream first
            xs = x + vb * ts
            need = np.maximum(_move_time(np.abs(xs - p[0]), 0), _move_time(abs(y - p[1]), 1))
            ok = (need + 0.1 <= ts) & (xs + vb * 0.4 <= self.x_limit)
            if ok.any():
                return (int(c), float(x), float(y))
        return None

    def _guess_class(self, p) -> int:
        """Class of an object held without a target: by the height it was picked at."""
        return int(np.argmin(np.abs(self.top - p[2])))

    def _pick(self, p, v) -> np.ndarray:
        c, x, y = self.target
        vb, top = self.cell.belt_speed, self.top[c]
        # Descend only when matched in position and velocity (a cup sweeping past the
        # object is momentarily aligned too); hysteresis keeps a started descent going.
        tol = 2 * ALIGN_M if self.descending else ALIGN_M
        aligned = np.hypot(p[0] - x, p[1] - y) < tol and np.hypot(v[0] - vb, v[1]) < 0.1
        self.descending = aligned
        z = top + 0.003 if aligned else max(self._travel_z(), top + 0.03)
        goal = lambda t, q: (np.array([x + vb * t, y, z]), np.array([vb, 0.0, 0.0]))  # noqa: E731
        return self._rollout(p, v, goal, 1.0 if aligned else 0.0)

    def _place(self, p, v, b: int) -> np.ndarray:
        bx, by = self.cell.bin_center(b)
        clear = self.cell.belt_top + CLEAR_DZ
        hold_xy = p[:2].copy()

        def goal(t, q):
            xy = (bx, by) if q[2] > clear else hold_xy
            return np.array([xy[0], xy[1], CARRY_Z]), np.zeros(3)

        over = np.hypot(p[0] - bx, p[1] - by) < 0.02 and np.hypot(v[0], v[1]) < 0.1 and p[2] > clear
        return self._rollout(p, v, goal, 0.0 if over else 1.0)

    def _rollout(self, p, v, goal, suction: float) -> np.ndarray:
        """Chase goal(t, pos) -> (pos, vel) with VMAX/AMAX from (p, v); sample every period."""
        per = int(round(self.period_s / ROLLOUT_DT))
        q, w = p.copy(), v.copy()
        out = np.empty((self.horizon, 4))
        out[:, 3] = suction
        for k in range(1, self.horizon * per + 1):
            gp, gv = goal(k * ROLLOUT_DT, q)
            e = gp - q
            step = np.minimum(20.0 * np.abs(e), np.sqrt(2 * AMAX * np.abs(e)))
            wd = np.clip(gv + np.sign(e) * step, -VMAX, VMAX)
            w += np.clip(wd - w, -AMAX * ROLLOUT_DT, AMAX * ROLLOUT_DT)
            q += w * ROLLOUT_DT
            if k % per == 0:
                out[k // per - 1, :3] = q
        return out


class JoiningExpert(ScriptedExpert):
    """The expert's plan continued from `prefix` (n, D): rows 0..n-1 are the prefix, the rest
    its rollout from the last one's position (and velocity, from the last two).
    predict: also take the plan's decisions (which object, aligned, descend) where the prefix
    ends: the gantry at its last waypoint, the objects carried on by the belt for the prefix's
    n periods, the rollout's time counted from there. Else they are taken from the
    observation, as ScriptedExpert does, while the rollout continues the prefix."""

    prefix: np.ndarray | None = None

    def __init__(self, cell: CellConfig, tokenizer: TokenizerConfig, predict: bool = False):
        super().__init__(cell, tokenizer)
        self.predict, self._t0 = predict, 0.0

    def _plan(self, obs: dict) -> np.ndarray:
        c = self.prefix
        self._t0 = len(c) * self.period_s if self.predict and c is not None and len(c) else 0.0
        if not self._t0:
            return super()._plan(obs)
        shift = self.cell.belt_speed * self._t0
        g = np.array(obs["gantry"], np.float64)
        g[:3] = c[-1, :3]
        if len(c) > 1:
            g[3:6] = (c[-1, :3] - c[-2, :3]) / self.period_s
        objs = np.array(obs["objects"], np.float64)
        objs[:, 1] += shift * (objs[:, 3] > 0.5)
        self._shift_target(shift)
        try:
            return super()._plan({**obs, "gantry": g, "objects": objs})
        finally:
            self._shift_target(-shift)  # the target stays in the observation's frame

    def _shift_target(self, dx: float) -> None:
        if self.target is not None:
            c, x, y = self.target
            self.target = (c, x + dx, y)

    def _rollout(self, p, v, goal, suction):
        c = self.prefix
        if c is None or len(c) == 0:
            return super()._rollout(p, v, goal, suction)
        if self._t0:  # the goals were set where the prefix ends: their time starts there
            goal = _delayed(goal, self._t0)
        n, per = len(c), int(round(self.period_s / ROLLOUT_DT))
        q = c[-1, :3].astype(float)
        w = (c[-1, :3] - c[-2, :3]) / self.period_s if n > 1 else np.asarray(v, float).copy()
        out = np.empty((self.horizon, 4))
        out[:, 3] = suction
        out[:n] = c
        for k in range(n * per + 1, self.horizon * per + 1):  # waypoint i is due at (i+1) periods
            gp, gv = goal(k * ROLLOUT_DT, q)
            e = gp - q
            step = np.minimum(20.0 * np.abs(e), np.sqrt(2 * AMAX * np.abs(e)))
            w += np.clip(
                np.clip(gv + np.sign(e) * step, -VMAX, VMAX) - w,
                -AMAX * ROLLOUT_DT,
                AMAX * ROLLOUT_DT,
            )
            q += w * ROLLOUT_DT
            if k % per == 0:
                out[k // per - 1, :3] = q
        return out


def _delayed(goal, t0: float):
    """goal(t, q) with its time origin moved t0 later."""
    return lambda t, q: goal(t - t0, q)


def _move_time(d, axis: int):
    """Trapezoidal-profile time (s) to move distance d (m) along an axis from rest to rest."""
    d = np.asarray(d, np.float64)
    vm, am = VMAX[axis], AMAX[axis]
    return np.where(d > vm * vm / am, d / vm + vm / am, 2 * np.sqrt(d / am))
