"""BatchRunner: one action chunk for each of several robots, decoded together in one batch.

The batch-1 TokenRunner's work, for B rows at once on the batched graphs
(models.export_batched, rtinfer.inference.backends.onnx_rows): each row's instruction prefix
(a snapshot per instruction, computed once in a batched prefill and restored into the row),
its observation segment (one batched prefill), then decode rounds. A round runs every row one
step: rows whose chunk-reuse drafter has drafts are verified, the others take one plain token
from the same pass (the verify graph's first row, as a sequential verify's bonus token does),
so acceptance lengths differ row by row and each row advances by its own. A row whose chunk is
complete idles (padded) until the batch is done. Each row has its own drafter (its robot's
previous chunk), positions and output; row b reads only its own cache row, so its logits
are bit-identical to its batch-1 graphs' (checked when the graphs are exported) and its
tokens are what the same speculative decode on its own would give: identical to its plain
greedy decode exactly as a sequential speculative decode is (tests/test_batch.py).
Greedy only; one budget level (so one exit depth) per batch; drafters "chunk" and "none".
Waypoints are streamed per row the moment each is final (on_waypoint(cycle, index, bins)).
Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rtinfer.inference.backends.onnx_rows import OnnxRows
from rtinfer.inference.budget import prefill_depth
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.decode import DecodeStats, completed_waypoints, greedy_accepted, settle
from rtinfer.inference.drafters import ChunkReuseDrafter, DraftContext
from rtinfer.inference.prefix_cache import PrefixCache
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import instruction_prefix, observation_segment
from rtinfer.transport.wire import now_ns

BATCH_DRAFTERS = ("chunk", "none")


@dataclass(slots=True)
class Row:
    """One robot's part of a batch: its cycle (its previous chunk in cycle.previous, which
    run() replaces with this chunk) and its observation's tokens."""

    cycle: Cycle
    instr: np.ndarray
    obs: np.ndarray


class BatchRunner:
    def __init__(
        self,
        model: ModelDir,
        *,
        drafter: str = "chunk",
        threads: int = 1,
        spin: bool | None = None,
        k_verify: int | None = None,
        clock: Callable[[], int] = now_ns,
    ):
        """clock: the monotonic ns clock of the cycles' first_token stamps (the node's)."""
        if drafter not in BATCH_DRAFTERS:
            raise ValueError(
                f"drafter {drafter!r} does not batch; use one of "
                f"{', '.join(BATCH_DRAFTERS)} (or batch 1)"
            )
        if not model.batches:
            raise ValueError(f"{model.path}: no batched graphs; python -m models.export_batched")
        self.model = md = model
        self.sessions = {b: OnnxRows(md, b, threads=threads, spin=spin) for b in md.batches}
        self.clock = clock
        tok, v = md.tokenizer, md.vocab
        self.D, self.full, self.T = tok.dim, md.n_layer, md.max_ctx
        self.a0, self.a1, self.pad = v.action_start, v.action_stop, v.special("PAD")
        verify = [
            k for (b, d, k), g in md.batched.items() if d == self.full and "verify" in g["roles"]
        ]
        self.k_verify = int(k_verify or max(verify, default=1))
        self.drafter = drafter if self.k_verify > 1 else "none"
        self.drafters = [ChunkReuseDrafter(tok.horizon, tok.dim) for _ in range(self.max_batch)]
        self.head_len, self.seg_len = 1 + md.obs.instr_length, md.obs.length + 1
        n = md.chunk_tokens
        self._out = np.zeros((self.max_batch, n), np.int64)
        self._target = np.zeros(self.k_verify, np.int64)
        self._ctx = DraftContext(self, 0, 0, 0)
        self.stats = [DecodeStats() for _ in range(self.max_batch)]
        self.counters = dict.fromkeys(("batches", "batched_rows"), 0)
        self._cache = PrefixCache(self.counters)

    @property
    def max_batch(self) -> int:
        return max(self.sessions)

    def batch_for(self, n: int) -> int:
        """The exported batch size a batch of n rows runs at (the smallest that holds them)."""
        return next(b for b in sorted(self.sessions) if b >= n)

    def run(
        self, rows: list[Row], on_waypoint: Callable[[Cycle, int, np.ndarray], None] | None = None
    ) -> list[np.ndarray]:
        """Decode one chunk per row (2 <= len(rows) <= max_batch; every row's cycle at the
        same level). Sets each cycle's first_token_ns; returns each row's bins (chunk * D,),
        views valid until the next call; sets each cycle's previous to this chunk and its
        stats."""
        n, level = len(rows), rows[0].cycle.level
        R = self.sessions[self.batch_for(n)]
        self.counters["batches"] += 1
        self.counters["batched_rows"] += n
        self._prefix(R, rows)
        logits = self._observe(R, rows, level)
        first = self.clock()
        D, N, out = self.D, level.chunk * self.D, self._out
        pos = [self.head_len + self.seg_len] * n
        m = [1] * n
        spec = self.drafter == "chunk" and level.spec_len > 0 and level.depth == self.full
        cap = max(1, min(level.spec_len, self.k_verify - 1))
        for i, r in enumerate(rows):
            r.cycle.first_token_ns = first
            out[i, 0] = logits[i, -1, self.a0 : self.a1].argmax()
            self.stats[i] = DecodeStats()
            if spec:
                d, prev, capture = self.drafters[i], r.cycle.previous, r.cycle.capture
                if prev is None or capture is None:
                    d.clear()
                else:
                    d.set_previous(prev[0], prev[1], capture, self.model.tokenizer.period_ns)
            self._emit(on_waypoint, r.cycle, i, 0, 1)
        drafts: list = [None] * n
        while min(m) < N:
            k, depth = 1, level.depth
            if spec:
                for i in range(n):
                    drafts[i] = self._draft(i, pos[i], m[i], N, cap) if m[i] < N else None
                # a verify pass holds every active row (those without drafts take its first
                # token), so each must fit k_verify positions before max_ctx
                if any(d is not None for d in drafts) and all(
                    pos[i] + self.k_verify <= self.T for i in range(n) if m[i] < N
                ):
                    k, depth = self.k_verify, self.full
            tok = R.tokens(depth, k)
            tok.fill(self.pad)
            for i in range(R.batch):
                if i >= n or m[i] >= N:  # idle row: pad at a valid position past its chunk
                    R.start[i] = min(pos[i] if i < n else pos[0], self.T - k)
                    continue
                tok[i, 0] = out[i, m[i] - 1] + self.a0
                g = 0 if drafts[i] is None or k == 1 else len(drafts[i])
                if g:
                    tok[i, 1 : g + 1] = drafts[i]
                    tok[i, 1 : g + 1] += self.a0
                R.start[i] = pos[i]
            logits = R.run(depth, k)
            for i in range(n):
                if m[i] >= N:
                    continue
                g = 0 if drafts[i] is None or k == 1 else len(drafts[i])
                take = self._accept(i, logits[i], g, drafts[i], m[i], N - m[i])
                st = self.stats[i]
                st.target_passes += depth == self.full
                st.draft_passes += depth != self.full
                self._emit(on_waypoint, rows[i].cycle, i, m[i], m[i] + take)
                m[i] += take
                pos[i] += take
        bins = []
        for i, r in enumerate(rows):
            self.stats[i].tokens = N
            chunk = out[i, :N]
            capture = r.cycle.capture
            r.cycle.previous = (
                (chunk.reshape(-1, D).copy(), capture) if capture is not None else None
            )
            r.cycle.stats = self.stats[i]
            bins.append(chunk)
        return bins

    # --- the prefix ------------------------------------------------------------------------
    def _prefix(self, R: OnnxRows, rows: list[Row]) -> None:
        """Every row's instruction prefix into its cache row: from the snapshot of that
        instruction, computed first (in one batched prefill) for those not yet seen."""
        cache = self._cache
        keys = [cache.key(r.instr) for r in rows]
        new = [i for i, key in enumerate(keys) if key not in cache]
        if new:
            tok = R.tokens(self.full, self.head_len)
            tok.fill(self.pad)
            for i in new:
                tok[i] = instruction_prefix(self.model.vocab, rows[i].instr)
            R.start.fill(0)
            R.run(self.full, self.head_len)
            for i in new:
                if keys[i] not in cache:  # two rows with one new instruction: kept once
                    cache.put(keys[i], R.snapshot(i, self.head_len))
        for i, key in enumerate(keys):
            # a row computed just now has its prefix in place already
            snap = cache.get(key) if i not in new else None
            if snap is not None:
                R.restore(i, snap)

    def _observe(self, R: OnnxRows, rows: list[Row], level) -> np.ndarray:
        """The observation segments, in one batched prefill at the level's prefill depth
        (budget.prefill_depth). Returns the logits (B, seg, V)."""
        depth = prefill_depth(level, self.full, lambda d: R.has_graph(d, self.seg_len))
        tok = R.tokens(depth, self.seg_len)
        tok.fill(self.pad)
        for i, r in enumerate(rows):
            tok[i] = observation_segment(self.model.vocab, r.obs)
        R.start.fill(self.head_len)
        return R.run(depth, self.seg_len)

    # --- decoding ----------------------------------------------------------------------------
    def _draft(self, i: int, pos: int, m: int, N: int, cap: int):
        ctx = self._ctx
        ctx.pos, ctx.last, ctx.index = pos, int(self._out[i, m - 1]) + self.a0, m
        ctx.chunk = self._out[i, :m]
        d = self.drafters[i].draft(ctx, min(cap, N - m))
        return d if len(d) else None

    def _accept(self, i: int, logits: np.ndarray, g: int, drafts, m: int, left: int) -> int:
        """Row i's new final tokens, written at out[i, m:], from its logits (k, V): one plain
        token (g = 0) or a verify's greedy acceptance of g drafts (the accepted drafts, then
        the target's own token). Returns how many (at most `left`)."""
        out = self._out[i]
        if g == 0:
            out[m] = logits[0, self.a0 : self.a1].argmax()
            return 1
        target = self._target[: g + 1]
        logits[: g + 1, self.a0 : self.a1].argmax(axis=1, out=target)
        a = greedy_accepted(drafts, target, g)
        return settle(out, m, left, drafts, a, target[a], self.drafters[i], target, self.stats[i])

    def _emit(self, on_waypoint, cycle: Cycle, i: int, before: int, now: int) -> None:
        """on_waypoint for every waypoint of row i completed by tokens [before, now)."""
        if on_waypoint is None:
            return
        D, out = self.D, self._out[i]
        for w in completed_waypoints(before, now, D):
            on_waypoint(cycle, w, out[w * D : (w + 1) * D])
