"""Drafters that run a model: a separate small draft policy, and the exit-depth cascade.

- `ModelDrafter`: a separate draft policy (its own backend and KV; same vocab and sequence
  layout as the target). `start(prefix)` prefills it with the cycle's prefix; each draft
  first feeds it the chunk's final tokens it has not seen (the accepted drafts are already
  in its KV: it wrote them while drafting), then runs up to k one-token steps.
- `CascadeDrafter`: chunk-reuse drafts, verified first in ONE pass at an early exit of the
  target itself; the drafts the exit agrees with, followed by the exit's own greedy token at
  the first disagreement and its rows after it (Jacobi-style), go on to the full-depth
  verify. Needs a (exit depth, k_verify) step graph in the model directory (one way to add
  it: rtinfer.bench.dynamic_models.with_graphs). `rounds` > 1 repeats the exit pass over its
  own output (Jacobi) until it stops changing.
Both leave greedy output token-identical to plain greedy: the full-depth verify decides.
"""

from __future__ import annotations

import numpy as np

from rtinfer.inference.drafters import ChunkReuseDrafter, DraftContext, Drafter, OnChunkReuse, pick


class ModelDrafter(Drafter):
    """Drafts with a separate draft policy on its own loaded Backend (`backend`, e.g.
    get_backend("onnx").load(draft_dir)). Call `start(prefix)` before each chunk's decode
    (prefix: the vocab ids before the first action token, as the target got them)."""

    name = "model"

    def __init__(self, backend, max_k: int = 16):
        super().__init__()
        self.backend = be = backend
        v = be.model.vocab
        self.a0, self.a1 = v.action_start, v.action_stop
        self._one = np.zeros(1, np.int64)
        self._bins = np.zeros(max_k, np.int64)
        self._q = np.zeros((max_k, self.a1 - self.a0))
        self._valid = 0  # draft KV positions [0, _valid) hold final tokens
        self._prefix = self._drafted_from = 0
        self.passes = 0  # draft forward passes (prefill chunks not counted)

    def check_target(self, target_model) -> None:
        """ValueError unless the draft shares the target's vocab and fits its context."""
        mine, theirs = self.backend.model, target_model
        if mine.vocab != theirs.vocab:
            raise ValueError(
                f"draft model {mine.path}: its vocab differs from the target's "
                f"({theirs.path}); export the draft with the target's vocab"
            )
        if mine.max_ctx < theirs.max_ctx:
            raise ValueError(
                f"draft model {mine.path}: max_ctx {mine.max_ctx} < the target's "
                f"{theirs.max_ctx}; export it with max_ctx >= {theirs.max_ctx}"
            )

    def start(self, prefix: np.ndarray) -> None:
        """Prefill the draft with this cycle's prefix (a fresh sequence)."""
        be = self.backend
        be.reset()
        be.prefill(prefix, 0)
        self._prefix = self._valid = len(prefix)

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        be = self.backend
        k = min(k, len(self._bins), be.max_ctx - ctx.pos)
        self.q = None
        if self._valid == 0 or k < 1:
            return self._bins[:0]
        # catch up: final tokens at positions [_valid, ctx.pos], the last being ctx.last
        chunk, P = ctx.chunk, self._prefix
        for p in range(self._valid, ctx.pos + 1):
            self._one[0] = chunk[p - P] + self.a0
            logits = be.step(self._one, p, None)[0, self.a0 : self.a1]
            self.passes += 1
        self._valid = ctx.pos + 1
        for i in range(k):
            b = self._bins[i] = pick(logits, ctx, self._q[i])
            if i + 1 < k:
                self._one[0] = b + self.a0
                logits = be.step(self._one, ctx.pos + 1 + i, None)[0, self.a0 : self.a1]
                self.passes += 1
        self._drafted_from = ctx.pos
        self.q = self._q[:k] if ctx.sample else None
        return self._bins[:k]

    def observe(self, accepted: int, drafted: int) -> None:
        super().observe(accepted, drafted)
        # the KV holds ctx.last and the first drafted-1 drafts; the accepted ones are final
        self._valid = self._drafted_from + 1 + min(accepted, drafted - 1)


class CascadeDrafter(OnChunkReuse):
    """Chunk-reuse drafts filtered by one verify at the target's exit `depth` (its KV writes
    touch only the first `depth` layers; the full-depth verify rewrites them all)."""

    name = "cascade"

    def __init__(
        self,
        reuse: ChunkReuseDrafter,
        depth: int,
        action_start: int,
        action_stop: int,
        k_verify: int = 8,
        rounds: int = 1,
    ):
        super().__init__(reuse)
        self.depth, self.a0, self.a1 = depth, action_start, action_stop
        self.rounds = rounds  # exit passes per draft at most (Jacobi: until they agree)
        self._v = np.zeros(k_verify, np.int64)
        self._bins = np.zeros(k_verify, np.int64)
        self.passes = self.rows = 0  # exit passes, and the rows they computed (padded)
        self.exit_accepted = 0  # chunk-reuse drafts the first exit pass agreed with

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        self.q = None
        plan = self.reuse.draft(ctx, k)
        g = len(plan)
        if g == 0 or ctx.sample:  # sampling: the exit's greedy filter would bias q
            return plan
        be, out = ctx.backend, self._bins[:g]
        v = self._v[: g + 1]
        v[0], v[1:] = ctx.last, plan + self.a0
        for r in range(self.rounds):
            rows = be.step(v, ctx.pos, self.depth)[:g, self.a0 : self.a1]
            self.passes += 1
            self.rows += be.pick_k(self.depth, g + 1, ctx.pos)
            rows.argmax(axis=1, out=out)
            a = 0
            while a < g and out[a] + self.a0 == v[a + 1]:
                a += 1
            if r == 0:
                self.exit_accepted += a
            if a == g:
                break
            v[1:] = out + self.a0
        return out
