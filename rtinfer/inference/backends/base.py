"""The backend interface: static-shape step graphs over one preallocated KV cache.

A backend owns the KV cache of one sequence (batch 1). `step(tokens, start_pos, depth)`
runs n tokens at positions [start_pos, start_pos + n) through `depth` layers, writes their
KV and returns logits (n, V). n may be smaller than the exported k: the graph is padded
with PAD (padded positions write KV that is never read before being rewritten: attention
only looks at positions <= its own, and every later step rewrites its own window).
The returned logits are a view into a buffer the backend reuses: consume them before the
next call. A backend that builds the model's token-gated graph sets (ModelDir.gated) lists
them in `gates`; `use_gate(name)` makes full-depth steps run that set (None: dense) without
loading anything, the KV cache kept as it is. Not thread-safe: one decoding thread per backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from rtinfer.model.directory import ModelDir, ModelError


class BackendError(ModelError):
    """A backend failed to load or run a model; the message says which file/option and the fix.
    A bad model directory raises ModelError (its base class) before any backend is involved."""


class Backend(ABC):
    name = "base"

    def __init__(self) -> None:
        self.model = None
        self.forwards: dict[int, int] = {}  # depth -> forward passes run (counters, not logs)
        self.gate: str | None = None  # the gated graph set full-depth steps run (None: dense)
        # depths whose graph takes any token count up to max_k in one session (a shared-k
        # graph): a pass costs what its width costs, with no other weights to fetch
        self.free_widths: frozenset[int] = frozenset()

    # --- subclass hooks -------------------------------------------------------------------
    @abstractmethod
    def _open(self, **opts) -> None:
        """Build sessions/engines and preallocate every buffer for self.model."""

    @abstractmethod
    def _tokens(self, depth: int, k: int) -> np.ndarray:
        """The (1, k) int64 host buffer the next `_run(depth, k, ...)` reads."""

    @abstractmethod
    def _run(self, depth: int, k: int, start_pos: int) -> np.ndarray:
        """Run graph (depth, k); advance the KV; return logits (1, k, V) (a reused buffer)."""

    def _select_gate(self, name: str | None) -> None:
        """Point the full-depth graphs at gated set `name` (None: dense); only called with a
        name in `gates`, so never on a backend that builds none; those that do override it."""
        raise NotImplementedError(
            f"the {self.name} backend lists gated sets but cannot "
            f"select {name!r}: override _select_gate"
        )

    @property
    def gates(self) -> tuple[str, ...]:
        """The gated graph sets this backend built (none by default)."""
        return ()

    def use_gate(self, name: str | None) -> None:
        """Run full-depth steps on gated set `name` from now on (None: the dense graphs).
        A name this backend did not build raises BackendError."""
        if name == self.gate:
            return
        if name is not None and name not in self.gates:
            have = ", ".join(self.gates) or "none"
            raise BackendError(
                f"gated level {name!r}: the {self.name} backend built no such "
                f"graph set (it has: {have}); run it on the onnx backend or "
                "leave gated levels out (default_levels(..., gates=backend.gates))"
            )
        self._select_gate(name)
        self.gate = name

    @abstractmethod
    def reset(self) -> None:
        """Zero the KV cache (a fresh sequence)."""

    @abstractmethod
    def snapshot(self, n_pos: int):
        """Copy of the KV of positions [0, n_pos), every layer (for prefix caching)."""

    @abstractmethod
    def restore(self, snap) -> None:
        """Write a snapshot back into the live KV cache."""

    # --- shared ---------------------------------------------------------------------------
    def load(self, model, **opts) -> Backend:
        """model: a ModelDir or its path. opts are backend-specific (see each backend)."""
        self.model = model if isinstance(model, ModelDir) else ModelDir.load(model)
        self.max_ctx, self.n_layer = self.model.max_ctx, self.model.n_layer
        self.pad = self.model.vocab.special("PAD")
        self._ks = {d: self.model.ks(d) for d in self.depths}
        self.forwards = dict.fromkeys(self.depths, 0)
        self._open(**opts)
        return self

    @property
    def depths(self) -> tuple[int, ...]:
        """Selectable depths: early exits, then full depth."""
        return tuple(sorted(set(self.model.config.get("exits", [])) | {self.model.n_layer}))

    def _use_graphs(self, dtype: str) -> None:
        """Run the `dtype` graph set (graphs.json "dtype"); a non-fp32 set is checked complete
        and against its sha256s first (ModelError naming the file otherwise)."""
        if dtype != "float32":
            self.model.check_graph_set(dtype)
        self._ks = {d: self.model.ks(d, dtype) for d in self.depths}

    def max_k(self, depth: int) -> int:
        return self._ks[depth][-1]

    def pick_k(self, depth: int, n: int, start_pos: int) -> int:
        """Smallest exported k >= n that fits before max_ctx, else the largest that fits."""
        best = 0
        for k in self._ks[depth]:  # ascending
            if start_pos + k > self.max_ctx:
                break
            best = k
            if k >= n:
                return k
        if not best:
            raise BackendError(
                f"no depth-{depth} graph fits at position {start_pos} (max_ctx {self.max_ctx})"
            )
        return best

    def has_graph(self, depth: int, k: int) -> bool:
        """An exported step graph runs k tokens at `depth` in one pass."""
        return k in self._ks.get(depth, ())

    def step(self, tokens: np.ndarray, start_pos: int, depth: int | None = None) -> np.ndarray:
        """Run n tokens (vocab ids) from start_pos at `depth` (None: full) in ONE forward
        pass; returns logits (n, V), a view valid until the next call. Raises BackendError
        if n exceeds every exported k at this depth (use `prefill` for long inputs)."""
        depth = self.n_layer if depth is None else depth
        if depth not in self._ks:
            raise BackendError(f"depth {depth} not exported; choose from {self.depths}")
        n = len(tokens)
        k = self.pick_k(depth, n, start_pos)
        if k < n:
            raise BackendError(f"{n} tokens exceed the largest depth-{depth} graph (k={k})")
        buf = self._tokens(depth, k)
        buf[0, :n] = tokens
        buf[0, n:] = self.pad
        self.forwards[depth] += 1
        return self._run(depth, k, start_pos)[0, :n]

    def prefill(self, tokens: np.ndarray, start_pos: int, depth: int | None = None) -> np.ndarray:
        """Run any number of tokens at `depth` (None: full; split over the exported k's if
        needed); returns the logits (V,) of the last token. Only layers < depth get KV."""
        n, at = len(tokens), 0
        depth = self.n_layer if depth is None else depth
        while at < n:
            k = min(self.pick_k(depth, n - at, start_pos + at), n - at)
            logits = self.step(tokens[at : at + k], start_pos + at, depth)
            at += k
        return logits[-1]
