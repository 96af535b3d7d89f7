"""Decoding one action chunk: plain or speculative, greedy or sampled, streamed per waypoint.

Logits are masked to the action range [action_start, action_stop): outputs are action bins.
- plain: one full-depth (or budget-depth) step per token.
- speculative: a Drafter proposes up to `gamma` tokens; ONE full-depth verify step over
  [last + drafts] scores them all. Greedy keeps the drafts that equal the target argmax and
  then the target's own token, so the output is token-identical to plain greedy. Sampling
  uses the Leviathan/Chen rejection rule (`speculative_accept`), which keeps plain
  sampling's output distribution. gamma adapts: +1 after full acceptance, -1 after a
  rejection, within [1, k_verify - 1] (drafters with `adapt_gamma = False` always get the
  full window). Every verify runs the k_verify graph, padded (another graph's weights
  would fall out of the CPU's caches), or, where the backend's full depth takes any width
  in one session (a shared-k graph, `free_widths`), exactly its g + 1 tokens; it hands the
  drafter the target's greedy bin per row (`observe_target`) so it can refine what it
  drafts next.
Forced prefix (real-time chunking): the robot's committed waypoints, as bins, are the
chunk's first tokens, fed and not sampled: ONE pass of the widest step graph at the
decoding depth takes them all (more passes only past its k), and its last row's logits give
the first free token; the rest decodes as above. Nothing forced: the plain path, unchanged.
`on_waypoint(index, bins (D,))` fires the moment a waypoint's D tokens are final (the view
is reused: copy to keep). Greedy decoding allocates nothing per token. Not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rtinfer.inference.drafters import DraftContext, Drafter, softmax


def speculative_accept(
    p: np.ndarray, q: np.ndarray | None, drafts: np.ndarray, rng: np.random.Generator
) -> tuple[int, int]:
    """Leviathan/Chen rejection sampling. p: (g+1, A) target probabilities; q: (g, A) draft
    probabilities (None: deterministic drafts, i.e. one-hot). Returns (accepted, next): the
    first `accepted` drafts stand, followed by token `next` (a resample from
    norm(max(0, p - q)) on rejection, or a bonus sample from p[g] after full acceptance)."""
    g = len(drafts)
    for i in range(g):
        d = int(drafts[i])
        qi = np.zeros(p.shape[1]) if q is None else q[i]
        if q is None:
            qi[d] = 1.0
        if rng.random() < min(1.0, p[i, d] / max(qi[d], 1e-300)):
            continue
        resid = np.maximum(p[i] - qi, 0.0)
        total = resid.sum()
        probs = resid / total if total > 0 else p[i]
        return i, int(rng.choice(len(probs), p=probs))
    return g, int(rng.choice(p.shape[1], p=p[g]))


def greedy_accepted(drafts: np.ndarray, target: np.ndarray, g: int) -> int:
    """How many of g drafts greedy verification keeps: those equal to the target's own
    greedy token at their row, up to the first that is not."""
    a = 0
    while a < g and drafts[a] == target[a]:
        a += 1
    return a


def settle(
    out: np.ndarray,
    m: int,
    left: int,
    drafts: np.ndarray,
    a: int,
    nxt: int,
    drafter: Drafter,
    target: np.ndarray,
    stats: DecodeStats,
) -> int:
    """One verify's outcome into the chunk: its first `a` drafts, then token `nxt`, written at
    out[m:], at most `left` tokens; the drafter hears how it did (observe, observe_target)
    and stats count the verify. Returns the tokens taken. The single-row Decoder and the
    batched runner (rtinfer.inference.batch) settle every verify here."""
    take = min(a + 1, left)
    out[m : m + min(a, take)] = drafts[: min(a, take)]
    if a < take:
        out[m + a] = nxt
    drafter.observe(a, len(drafts))
    drafter.observe_target(target)
    stats.verifies += 1
    stats.accepted += a
    return take


def completed_waypoints(before: int, now: int, dim: int) -> range:
    """The waypoints (D = dim tokens each) that tokens [before, now) complete: those ending
    after token `before` and by token `now`."""
    return range(before // dim, now // dim)


@dataclass
class DecodeStats:
    tokens: int = 0
    target_passes: int = 0  # full-depth (target) forward passes after the prefill
    draft_passes: int = 0
    verifies: int = 0
    accepted: int = 0  # drafts accepted over all verifies
    forced: int = 0  # tokens fed as a forced prefix (a committed prefix)
    forced_passes: int = 0  # the passes that fed them
    gamma_trace: list = field(default_factory=list)

    @property
    def tokens_per_target_pass(self) -> float:
        """Tokens per target forward pass, counting the prefill that gives token 0."""
        return self.tokens / (self.target_passes + 1) if self.tokens else 0.0


class Decoder:
    """Decodes chunks against a loaded Backend. `decode(...)` returns bins (n,) int64, a view
    of a reused buffer."""

    def __init__(
        self,
        backend,
        *,
        sample: bool = False,
        temperature: float = 1.0,
        k_verify: int | None = None,
        adaptive: bool = True,
        seed: int = 0,
    ):
        md = backend.model
        self.backend, self.sample, self.temperature = backend, sample, temperature
        self.a0, self.a1 = md.vocab.action_start, md.vocab.action_stop
        full = backend.n_layer
        verify_ks = [
            g["k"]
            for g in md.manifest["graphs"]
            if "verify" in g.get("roles", ()) and g["depth"] == full
        ]
        self.k_verify = int(k_verify or (max(verify_ks) if verify_ks else backend.max_k(full)))
        self.adaptive = adaptive
        self.gamma = self.k_verify - 1
        self.rng = np.random.default_rng(seed)
        self._out = np.zeros(md.chunk_tokens, np.int64)
        self._one = np.zeros(1, np.int64)
        self._verify = np.zeros(self.k_verify, np.int64)
        self._target = np.zeros(self.k_verify, np.int64)  # the verify's argmax per row
        self._forced = np.zeros(md.chunk_tokens, np.int64)  # a forced prefix's vocab ids
        # one context for every round (sample/temperature are fixed for a Decoder's life)
        self._ctx = DraftContext(backend, 0, 0, 0, sample, temperature, self.rng)
        self.stats = DecodeStats()

    def _pick(self, logits: np.ndarray) -> int:
        a = logits[self.a0 : self.a1]
        if not self.sample:
            return int(a.argmax())
        return int(self.rng.choice(len(a), p=softmax(a, self.temperature)))

    def decode(
        self,
        first_logits: np.ndarray,
        pos: int,
        n: int,
        *,
        depth: int | None = None,
        drafter: Drafter | None = None,
        gamma: int | None = None,
        dim: int = 1,
        on_waypoint=None,
        forced: np.ndarray | None = None,
    ) -> np.ndarray:
        """first_logits: (V,) logits of the last prefix token; pos: its position + 1.
        n: action tokens to produce (<= the model's chunk); depth: target depth (None:
        full; speculation only at full depth); gamma: speculation length cap. forced: the
        chunk's first tokens (bins, at most n), fed in one pass, not sampled."""
        be, out, st = self.backend, self._out, DecodeStats()
        self.stats = st
        depth = be.n_layer if depth is None else depth
        spec = drafter is not None and depth == be.n_layer
        cap = self.k_verify - 1 if gamma is None else max(1, min(gamma, self.k_verify - 1))
        self.gamma = min(self.gamma, cap) if self.adaptive else cap
        if forced is not None and len(forced):
            m, pos = self._force(forced, pos, n, depth, dim, on_waypoint)
        else:
            out[0] = self._pick(first_logits)
            m = 1
            self._emit(on_waypoint, dim, 0, 1)
        while m < n:
            if spec:
                got = self._spec_round(drafter, pos, m, n, cap)
            else:
                got = 0
            if got == 0:  # plain step
                self._one[0] = out[m - 1] + self.a0
                out[m] = self._pick(be.step(self._one, pos, depth)[0])
                st.target_passes += depth == be.n_layer
                st.draft_passes += depth != be.n_layer
                got = 1
            self._emit(on_waypoint, dim, m, m + got)
            m, pos = m + got, pos + got
        st.tokens = n
        return out[:n]

    def _force(
        self, forced: np.ndarray, pos: int, n: int, depth: int, dim: int, on_waypoint
    ) -> tuple[int, int]:
        """Tokens [0, f) are `forced` (f = its length, at most n): final at once (their
        waypoints emitted before any pass), fed in passes of the widest step graph at
        `depth` (one, unless f is over its widest k), the last row's logits picking token f.
        Returns (tokens final, the position of the newest, not yet fed)."""
        be, out, st = self.backend, self._out, self.stats
        f = min(len(forced), n)
        out[:f] = forced[:f]
        self._emit(on_waypoint, dim, 0, f)
        st.forced += f
        if f == n:  # the whole chunk is committed: nothing left to decode
            return n, pos + n - 1
        ids, i = self._forced, 0
        np.add(out[:f], self.a0, out=ids[:f])
        while i < f:  # the smallest graph that takes the rest, or the widest that fits
            w = min(be.pick_k(depth, f - i, pos + i), f - i)
            logits = be.step(self._padded(ids[i : i + w], pos + i, depth), pos + i, depth)
            st.forced_passes += 1
            st.target_passes += depth == be.n_layer
            st.draft_passes += depth != be.n_layer
            i += w
        out[f] = self._pick(logits[w - 1])
        self._emit(on_waypoint, dim, f, f + 1)
        return f + 1, pos + f

    def _padded(self, ids: np.ndarray, pos: int, depth: int) -> np.ndarray:
        """ids, padded to the verify graph's k where it takes them at this depth (the graph
        every verify runs: a second graph's weights would fall out of the CPU's cache, and
        conveyor-v1's k=4 graph measured slower than its k=8 one), else as they are; as they
        are too where the depth's widths are free (a shared-k graph)."""
        be, n = self.backend, len(ids)
        if depth != be.n_layer or n > self.k_verify or depth in be.free_widths:
            return ids
        k = min(be.pick_k(depth, self.k_verify, pos), self.k_verify)
        if k < n:
            return ids
        v = self._verify[:k]
        v[:n] = ids
        v[n:] = be.pad
        return v

    def _emit(self, on_waypoint, dim: int, before: int, now: int) -> None:
        """Fire on_waypoint for every waypoint completed by tokens [before, now)."""
        if on_waypoint is None:
            return
        for w in completed_waypoints(before, now, dim):
            on_waypoint(w, self._out[w * dim : (w + 1) * dim])

    def _spec_round(self, drafter: Drafter, pos: int, m: int, n: int, cap: int) -> int:
        """One draft + verify; returns the number of new final tokens (0: nothing drafted)."""
        be, out, st = self.backend, self._out, self.stats
        adapt = self.adaptive and drafter.adapt_gamma
        full = be.n_layer
        g = min(self.gamma if adapt else cap, n - m, self.k_verify - 1)
        if full in be.free_widths:  # one session takes any width: verify exactly g + 1
            k = be.pick_k(full, g + 1, pos)
        else:  # every verify runs the one verify graph (padded): switching between graphs
            # of different k costs more on a CPU (weights fall out of cache) than the padding
            k = min(be.pick_k(full, self.k_verify, pos), self.k_verify)
        g = min(g, k - 1)
        if g < 1:
            return 0
        ctx = self._ctx
        ctx.pos, ctx.last, ctx.index, ctx.chunk = pos, int(out[m - 1]) + self.a0, m, out[:m]
        drafts = drafter.draft(ctx, g)
        g = len(drafts)
        if g == 0:
            return 0
        st.draft_passes += g if getattr(drafter, "depth", None) else 0
        v = self._verify[:k]
        v[0] = ctx.last
        v[1 : g + 1] = drafts
        v[1 : g + 1] += self.a0
        v[g + 1 :] = be.pad
        logits = be.step(v, pos, be.n_layer)[: g + 1, self.a0 : self.a1]
        st.target_passes += 1
        target = self._target[: g + 1]
        logits.argmax(axis=1, out=target)
        if self.sample:
            a, nxt = speculative_accept(
                softmax(logits, self.temperature), drafter.q, drafts, self.rng
            )
        else:
            a = greedy_accepted(drafts, target, g)
            nxt = int(target[a])
        take = settle(out, m, n - m, drafts, a, nxt, drafter, target, st)
        if adapt:
            self.gamma = min(self.gamma + 1, cap) if a == g else max(self.gamma - 1, 1)
        return take
