"""Drafters for speculative decoding: cheap guesses that the full-depth model verifies.

Interface: `draft(ctx, k) -> bins` (up to k action bins for token indices
ctx.index .. ctx.index + k - 1 of the chunk; fewer or none is fine), then
`observe(accepted, drafted)` after the verify. `q` holds the draft distributions
(len(bins), A) of the last draft when the drafter samples, or None for a deterministic
draft (treated as one-hot by the rejection rule). Stats are counters per drafter.
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


class Drafter:
    name = "none"

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

    @property
    def acceptance(self) -> float:
        return self.stats["accepted"] / max(self.stats["drafted"], 1)


def softmax(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = np.asarray(x, np.float64) / temperature
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


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
            logits = ctx.backend.step(self._one, ctx.pos + i, self.depth)[0, self.a0:self.a1]
            if ctx.sample:
                self._q[i] = softmax(logits, ctx.temperature)
                b = int(ctx.rng.choice(len(logits), p=self._q[i]))
            else:
                b = int(logits.argmax())
            self._bins[i] = b
            tok = b + self.a0
        self.q = self._q[:k] if ctx.sample else None
        return self._bins[:k]


class ChunkReuseDrafter(Drafter):
    """The previous cycle's chunk, shifted by the waypoints that elapsed between the two
    captures (round(delta / period_ns)) and padded by repeating its last waypoint."""
    name = "chunk"

    def __init__(self, horizon: int, dim: int):
        super().__init__()
        self.horizon, self.dim = horizon, dim
        self._plan = np.zeros(horizon * dim, np.int64)
        self._valid = 0  # tokens of _plan that hold a draft
        self.prev_capture_ns: int | None = None

    def set_previous(self, chunk_bins: np.ndarray, capture_ns: int, now_capture_ns: int,
                     period_ns: int) -> None:
        """Prepare drafts for the cycle captured at now_capture_ns from the chunk
        (H', D) computed for capture_ns. Allocation-free apart from reshape views."""
        prev = np.asarray(chunk_bins).reshape(-1, self.dim)
        shift = int(round((now_capture_ns - capture_ns) / period_ns))
        self._valid = 0
        if shift < 0 or shift >= len(prev):
            return
        tail = prev[shift:]
        plan = self._plan.reshape(self.horizon, self.dim)
        n = min(len(tail), self.horizon)
        plan[:n] = tail[:n]
        plan[n:] = tail[-1]
        self._valid = self.horizon * self.dim

    def clear(self) -> None:
        self._valid = 0

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        self.q = None
        return self._plan[ctx.index:min(ctx.index + k, self._valid)]


class FixedDrafter(Drafter):
    """Drafts from a given token plan (tests and separate draft models' outputs)."""
    name = "fixed"

    def __init__(self, plan: np.ndarray):
        super().__init__()
        self.plan = np.asarray(plan, np.int64)

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        self.q = None
        return self.plan[ctx.index:ctx.index + k]
