"""Drafters for speculative decoding: cheap guesses that the full-depth model verifies.

Interface: `draft(ctx, k) -> bins` (up to k action bins for token indices
ctx.index .. ctx.index + k - 1 of the chunk; fewer or none is fine), then
`observe(accepted, drafted)` and `observe_target(target)` after the verify (target: the
verify's greedy bin at each of its rows, i.e. for tokens ctx.index .. ctx.index + len - 1;
rows past a rejection were computed behind a wrong token). `q` holds the draft
distributions (len(bins), A) of the last draft when the drafter samples, or None for a
deterministic draft (treated as one-hot by the rejection rule). Stats are counters per
drafter. `adapt_gamma = False` asks the decoder for the full window every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class DraftContext:
    """What a drafter may look at. `last` is the newest final token (vocab id), not yet in
    the KV; it sits at position `pos`. `index` = tokens of this chunk already final."""

    backend: object
    pos: int
    last: int
    index: int
    sample: bool = False
    temperature: float = 1.0
    rng: np.random.Generator | None = None
    chunk: np.ndarray | None = None  # this chunk's final bins so far, (index,) view


class Drafter:
    name = "none"
    adapt_gamma = True  # the decoder shortens the window after rejections

    def __init__(self) -> None:
        self.q = None
        self.stats = {"verifies": 0, "drafted": 0, "accepted": 0}

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        return np.empty(0, np.int64)

    def observe(self, accepted: int, drafted: int) -> None:
        s = self.stats
        s["verifies"] += 1
        s["drafted"] += drafted
        s["accepted"] += accepted

    def observe_target(self, target: np.ndarray) -> None:
        """The last verify's greedy bins per row (a reused buffer: copy to keep)."""

    @property
    def acceptance(self) -> float:
        return self.stats["accepted"] / max(self.stats["drafted"], 1)


def softmax(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = np.asarray(x, np.float64) / temperature
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def pick(logits: np.ndarray, ctx: DraftContext, q_row: np.ndarray) -> int:
    """One drafted bin from a drafter's logits over the action bins: sampled when ctx
    samples (its distribution kept in q_row, for the rejection rule), else greedy."""
    if ctx.sample:
        q_row[:] = softmax(logits, ctx.temperature)
        return int(ctx.rng.choice(len(logits), p=q_row))
    return int(logits.argmax())


class EarlyExitDrafter(Drafter):
    """Self-speculative (LayerSkip): k single-token steps at a shallow exit `depth`.
    Its KV writes touch only the first `depth` layers; the verify rewrites them all."""

    name = "self"

    def __init__(self, depth: int, action_start: int, action_stop: int, max_k: int = 16):
        super().__init__()
        self.depth, self.a0, self.a1 = depth, action_start, action_stop
        self._one = np.zeros(1, np.int64)
        self._bins = np.zeros(max_k, np.int64)
        self._q = np.zeros((max_k, action_stop - action_start))

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        k = min(k, len(self._bins), ctx.backend.max_ctx - ctx.pos)
        tok = ctx.last
        for i in range(k):
            self._one[0] = tok
            logits = ctx.backend.step(self._one, ctx.pos + i, self.depth)[0, self.a0 : self.a1]
            b = self._bins[i] = pick(logits, ctx, self._q[i])
            tok = b + self.a0
        self.q = self._q[:k] if ctx.sample else None
        return self._bins[:k]


class ChunkReuseDrafter(Drafter):
    """The previous cycle's chunk, shifted by the waypoints that elapsed between the two
    captures (round(delta / period_ns)). Waypoints past its end repeat the step between
    its last two waypoints from the waypoint before them (constant velocity in bins,
    clipped to the backend's action bins). Without a previous chunk, this chunk's own
    final waypoints are extrapolated instead (nothing is drafted for its first waypoint).

    Three corrections, each measured on the recorded stream and on three held-out
    episodes (docs/benchmarks.md):
    - Settling: a dimension the previous chunk holds still from the shift on takes, in the
      first waypoint, the previous chunk's waypoint before the shift (where the robot is
      now). A policy's first waypoint tracks where the robot is, and at rest that sits a
      bin or two off the target the later waypoints hold.
    - Braking: where both the previous chunk and this one slow down in a dimension, the
      extrapolated step keeps slowing at the same rate, down to zero, never reversing.
    - Re-anchoring: after a rejection that missed by two bins or more, the target's row for
      the same dimension one waypoint later was computed from the missed value; it is
      moved by the miss.

    Every verify refines the plan with the target's greedy bin at each verified row
    (Jacobi-style): the rows after a rejection sit behind one wrong token, but an action
    token depends mostly on the observation and the same waypoint's tokens, so they beat
    the stale plan. Drafting costs no forward pass and a rejected verify still refines
    the plan, so the decoder always gives this drafter the full window.
    """

    name = "chunk"
    adapt_gamma = False
    REANCHOR_BINS = 2

    def __init__(self, horizon: int, dim: int):
        super().__init__()
        self.horizon, self.dim = horizon, dim
        self._plan = np.zeros(horizon * dim, np.int64)
        self._vel = np.zeros(dim, np.int64)  # the previous chunk's last step
        self._vel0 = np.zeros(dim, np.int64)  # and the step before it
        self._has_vel = self._has_vel0 = False
        self._src = 0  # plan tokens [0, _src) come from the previous chunk
        self._seen = 0  # plan tokens [0, _seen) are final or refined by a verify
        self._index = 0  # first token of the last draft
        self._accepted = self._drafted = 0  # of the last verify
        self._hi = 0  # the highest action bin

    def set_previous(
        self, chunk_bins: np.ndarray, capture_ns: int, now_capture_ns: int, period_ns: int
    ) -> None:
        """Prepare drafts for the cycle captured at now_capture_ns from the chunk
        (H', D) computed for capture_ns. Allocation-free apart from reshape views."""
        prev = np.asarray(chunk_bins).reshape(-1, self.dim)
        shift = int(round((now_capture_ns - capture_ns) / period_ns))
        self.clear()
        if shift < 0 or shift >= len(prev):
            return
        n = min(len(prev) - shift, self.horizon)
        self._plan.reshape(self.horizon, self.dim)[:n] = prev[shift : shift + n]
        self._src = n * self.dim
        if shift and n >= 2:  # one waypoint left cannot show a dimension holding still
            seg = prev[shift : shift + n, 1:]  # dimension 0 of token 0 comes from the prefill
            still = seg.min(axis=0) == seg.max(axis=0)
            np.copyto(self._plan[1 : self.dim], prev[shift - 1, 1:], where=still)  # settling
        if len(prev) >= 2:
            np.subtract(prev[-1], prev[-2], out=self._vel)
            self._has_vel = True
        if len(prev) >= 3:
            np.subtract(prev[-2], prev[-3], out=self._vel0)
            self._has_vel0 = True

    @property
    def plan(self) -> np.ndarray:
        """The whole chunk's plan (chunk_tokens,) as of the last draft or verify: final
        tokens, then refined or drafted ones, then the shifted previous chunk (a view)."""
        return self._plan

    def clear(self) -> None:
        """No previous chunk: draft from this chunk's own final tokens."""
        self._src = self._seen = 0
        self._has_vel = self._has_vel0 = False

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        self.q = None
        i, plan = ctx.index, self._plan
        if ctx.chunk is not None:
            plan[:i] = ctx.chunk[:i]  # final tokens, including the prefill's token 0
        self._index, self._seen = i, max(self._seen, i)
        self._hi = ctx.backend.model.vocab.n_action_bins - 1
        stop = min(i + k, len(plan))
        start = max(self._src, self._seen)
        if start < stop:
            stop = self._extrapolate(start, stop)
        return plan[i:stop]

    def _extrapolate(self, start: int, stop: int) -> int:
        """Fill plan tokens [start, stop), which have no source, at constant velocity
        (braking where both chunks slow down); returns where it stopped (a first waypoint
        cannot be extrapolated)."""
        plan, D, hi = self._plan, self.dim, self._hi
        for j in range(start, stop):
            if j < D:
                return j
            if self._has_vel:
                step = int(self._vel[j % D])
                if j >= 3 * D and self._has_vel0:
                    own, own0 = plan[j - D] - plan[j - 2 * D], plan[j - 2 * D] - plan[j - 3 * D]
                    step = _braking(step, int(self._vel0[j % D]), int(own), int(own0))
                v = plan[j - D] + step
            else:
                v = plan[j - D] if j < 2 * D else 2 * plan[j - D] - plan[j - 2 * D]
            plan[j] = 0 if v < 0 else hi if v > hi else v
        return stop

    def observe(self, accepted: int, drafted: int) -> None:
        super().observe(accepted, drafted)
        self._accepted, self._drafted = accepted, drafted

    def observe_target(self, target: np.ndarray) -> None:
        i, plan, a = self._index, self._plan, self._accepted
        n = min(len(target), len(plan) - i)
        miss = int(plan[i + a] - target[a]) if a < min(self._drafted, n) else 0
        plan[i : i + n] = target[:n]
        self._seen = max(self._seen, i + n)
        j = i + a + self.dim  # re-anchoring
        if abs(miss) >= self.REANCHOR_BINS and j < i + n:
            plan[j] = min(max(plan[j] - miss, 0), self._hi)


class OnChunkReuse(Drafter):
    """A drafter that moves or filters a ChunkReuseDrafter's plan (`reuse`): every verify's
    outcome goes on to that plan, which it refines."""

    adapt_gamma = False

    def __init__(self, reuse: ChunkReuseDrafter):
        super().__init__()
        self.reuse = reuse

    def observe(self, accepted: int, drafted: int) -> None:
        super().observe(accepted, drafted)
        self.reuse.observe(accepted, drafted)

    def observe_target(self, target: np.ndarray) -> None:
        self.reuse.observe_target(target)


def _braking(step: int, step0: int, own: int, own0: int) -> int:
    """The extrapolated step: `step` (the previous chunk's last), unless both chunks slow
    down (|step| < |step0| and |own| < |own0|, no sign change): then own's next, slowing at
    the same rate, stopping at zero and staying stopped."""
    if not (abs(step) < abs(step0) and step * step0 > 0):
        return step
    if own == 0 and own0 == 0:
        return 0  # this chunk has stopped: it stays stopped
    if abs(own) < abs(own0) and own * own0 >= 0:
        nxt = 2 * own - own0
        return nxt if nxt * own0 > 0 else 0
    return step


class FixedDrafter(Drafter):
    """Drafts from a given token plan (tests and separate draft models' outputs)."""

    name = "fixed"

    def __init__(self, plan: np.ndarray):
        super().__init__()
        self.plan = np.asarray(plan, np.int64)

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        self.q = None
        return self.plan[ctx.index : ctx.index + k]
