"""ONNX Runtime backend: one session per exported (depth, k) graph, all sharing the KV.

Buffers are allocated once at load: a (1, k) token buffer and a (1, k, V) logits buffer
per graph, one start_pos buffer, and TWO KV buffers. Each session holds two IOBindings
bound once (kv=A -> kv_out=B and kv=B -> kv_out=A); a step writes the token ids into the
bound numpy buffer, runs, and swaps which KV is live. ORT does not document writing an
output over an input, so in-place KV (`inplace_kv=True`, half the KV memory, no swap) is
opt-in. On the CPU provider every bound buffer is numpy memory shared with ORT, so the
decode loop allocates nothing; on CUDA the KV stays on the device and tokens/logits are
copied by ORT.
KV rows (CPU): where graphs.json lists "kv_rows" twins of the running set (models.kv_rows:
each checked equal to its kv_out graph to the bit), each session binds per-layer views of ONE
cache as read-only inputs and returns only the k new positions' KV, which `_run` writes into
the cache: no Split, Where-copy and Concat of the whole cache per step (`rtinfer bench scale`,
100 M int4: the chunk's p50 0.86-0.93x and the k=1 step's 0.8x the kv_out graphs', interleaved).
Options (load(..., **opts)): threads (intra-op, default 1), inter_threads (1),
providers ("cpu" | "cuda" | "auto", default "cpu"), precision ("fp32" | "fp16" | "int8" |
"int4": which graph set of graphs.json runs; the KV is float16 for fp16, float32 otherwise),
dtype (the older spelling: "float32" | "float16"), inplace_kv (False), opt_level ("all" |
"extended" | "basic" | "disable"), spin (None: ORT default; False saves a core on a busy
host at some latency cost), kv_rows (None: the KV-rows twins where the directory has a
complete set of the running precision, on CPU, without gated sets; True: them or
BackendError; False: the kv_out graphs), shared_k (None: a depth's shared-k graph, where
graphs.json lists one of the running set (models.shared_k), runs every k it covers, on CPU,
without kv_rows or gated sets; True: them or BackendError; False: the static graphs).
Shared k (CPU): one graph per depth with a free token count, so the prefill, verify and
decode step of a depth are one session and read one copy of the weights; with static graphs
the prefill's weights evicted the verify's from the caches (`rtinfer bench decode`).
Token-gated graph sets (graphs.json "gated") of the running precision get sessions of their
own at load, bound to the same KV buffers; use_gate swaps which tables full-depth steps use.
"""

from __future__ import annotations

import hashlib

import numpy as np

from rtinfer.inference.backends.base import Backend, BackendError
from rtinfer.model.directory import graph_dtype

_LEVELS = {
    "all": "ORT_ENABLE_ALL",
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disable": "ORT_DISABLE_ALL",
}
_NP = {"float32": np.float32, "float16": np.float16}


class OnnxBackend(Backend):
    name = "onnx"

    def _open(
        self,
        threads: int = 1,
        inter_threads: int = 1,
        providers: str = "cpu",
        dtype: str = "float32",
        inplace_kv: bool = False,
        opt_level: str = "all",
        spin: bool | None = None,
        precision: str | None = None,
        kv_rows: bool | None = None,
        shared_k: bool | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise BackendError(
                f"onnxruntime is not installed ({e}); pip install onnxruntime"
            ) from None
        if opt_level not in _LEVELS:
            raise BackendError(f"opt_level must be one of {list(_LEVELS)}, not {opt_level!r}")
        dtype = graph_dtype(precision or dtype)
        self._use_graphs(dtype)
        self._ort, self.dtype = ort, dtype
        avail = ort.get_available_providers()
        want_cuda = providers == "cuda" or (
            providers == "auto" and "CUDAExecutionProvider" in avail
        )
        if want_cuda and "CUDAExecutionProvider" not in avail:
            raise BackendError(
                f"CUDA provider requested but ORT offers only {avail}; "
                "install onnxruntime-gpu or use providers='cpu'"
            )
        self.device = "cuda" if want_cuda else "cpu"
        prov = (
            ["CUDAExecutionProvider", "CPUExecutionProvider"]
            if want_cuda
            else ["CPUExecutionProvider"]
        )
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = int(threads), int(inter_threads)
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[opt_level])
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if spin is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        md = self.model
        rows = self._rows_files(dtype, kv_rows)
        shared = {} if rows else self._shared_files(dtype, shared_k)
        free = set()
        for depth in {d for d, _ in shared}:  # one session: every width up to its largest k
            ks = self._ks[depth]
            if all((depth, k) in shared for k in ks):
                path = shared[(depth, ks[0])]
                self._ks[depth] = list(range(1, ks[-1] + 1))
                shared.update({(depth, k): path for k in self._ks[depth]})
                free.add(depth)
        self.free_widths = frozenset(free)
        kv_dtype = _NP[md.kv_dtype(dtype)]
        self._kv_np = [
            np.zeros(md.kv_shape, kv_dtype) for _ in range(1 if inplace_kv or rows else 2)
        ]
        self._kv = [self._ortvalue(a) for a in self._kv_np]
        # per-layer (k, v) views of the one cache: the rows graphs' inputs, bound once
        self._layers = (
            [[self._ortvalue(self._kv_np[0][l, j]) for j in range(2)] for l in range(md.n_layer)]
            if rows
            else []
        )
        self._new: dict = {}
        self._start = np.zeros(1, np.int64)
        start_ov = ort.OrtValue.ortvalue_from_numpy(self._start)
        self._live, self._sessions, self._bind, self._tok, self._logits = 0, {}, {}, {}, {}
        self._opened: dict = {}  # path -> session: a shared-k graph serves several k
        for depth in self.depths:
            for k in self._ks[depth]:
                path = (
                    rows.get((depth, k)) or shared.get((depth, k)) or md.graph_path(dtype, depth, k)
                )
                self._session(path, depth, k, so, prov, start_ov)
        dense = (self._sessions, self._bind, self._tok, self._logits)
        self._tables = {None: dense}
        for name, gs in md.gated.items():
            if gs.dtype != dtype:
                continue
            self._sessions, self._bind, self._tok, self._logits = (dict(t) for t in dense)
            for k, g in gs.graphs.items():
                self._session(md.path / g["file"], self.n_layer, k, so, prov, start_ov)
            self._tables[name] = (self._sessions, self._bind, self._tok, self._logits)
        self._select_gate(None)

    def _rows_files(self, dtype: str, want: bool | None) -> dict:
        """(depth, k) -> path of the kv-rows twin of every graph of set `dtype`, or {} where
        they are not used (see kv_rows in the module doc)."""
        md = self.model
        rows = {
            (int(g["depth"]), int(g["k"])): md.path / g["file"]
            for g in md.manifest.get("kv_rows", [])
            if g["dtype"] == dtype
        }
        need = {(d, k) for d, ks in self._ks.items() for k in ks}
        missing_set = f"the directory has no complete kv_rows set of {dtype}"
        if not self._use_optional(
            "kv_rows", want, dtype, None if need <= set(rows) else missing_set
        ):
            return {}
        missing = [p for p in rows.values() if not p.is_file()]
        if missing:
            raise BackendError(
                f"{missing[0]} listed in graphs.json kv_rows is missing; "
                "re-export (python -m models.kv_rows DIR)"
            )
        return {key: rows[key] for key in need}

    def _use_optional(self, key: str, want: bool | None, dtype: str, absent: str | None) -> bool:
        """Whether the optional graphs of graphs.json `key` (kv_rows, shared_k) run: `want`
        None uses them where they can, False never, True requires them (BackendError with
        the reason and the command that exports them). absent: why the directory's are not
        usable (None: they are there)."""
        why = (absent and f"{absent} (python -m models.{key} DIR)") or (
            f"{key} runs on the CPU provider only"
            if self.device != "cpu"
            else f"{key} does not cover gated sets"
            if any(g.dtype == dtype for g in self.model.gated.values())
            else ""
        )
        if want and why:
            raise BackendError(f"{self.model.path}: {key}=True but {why}")
        return bool(want or (want is None and not why))

    def _shared_files(self, dtype: str, want: bool | None) -> dict:
        """(depth, k) -> path of the shared-k graph that runs it, for every k of set `dtype`
        a listed shared graph covers, or {} where they are not used (see shared_k in the
        module doc)."""
        md = self.model
        listed = [g for g in md.manifest.get("shared_k", []) if g["dtype"] == dtype]
        absent = None if listed else f"the directory lists no shared_k graph of {dtype}"
        if not self._use_optional("shared_k", want, dtype, absent):
            return {}
        out = {}
        for g in listed:
            path = md.path / g["file"]
            if not path.is_file():
                raise BackendError(
                    f"{path} listed in graphs.json shared_k is missing; "
                    "re-export (python -m models.shared_k DIR)"
                )
            if hashlib.sha256(path.read_bytes()).hexdigest() != g.get("sha256"):
                raise BackendError(
                    f"{path}: sha256 differs from graphs.json shared_k; the file is corrupt "
                    "or stale: re-export (python -m models.shared_k DIR)"
                )
            depth = int(g["depth"])
            out.update({(depth, int(k)): path for k in g["ks"] if k in self._ks.get(depth, ())})
        return out

    @property
    def gates(self) -> tuple[str, ...]:
        return tuple(n for n in self._tables if n is not None)

    def _select_gate(self, name: str | None) -> None:
        self._sessions, self._bind, self._tok, self._logits = self._tables[name]

    def _session(self, path, depth: int, k: int, so, prov, start_ov) -> None:
        """A session for graph (depth, k) at `path`, its buffers and both IOBindings, into
        the current tables."""
        ort, md, V = self._ort, self.model, int(self.model.config["vocab_size"])
        sess = self._opened.get(path)
        try:
            sess = sess or ort.InferenceSession(str(path), so, providers=prov)
        except Exception as e:  # ORT raises its own untyped errors
            raise BackendError(f"{path}: onnxruntime cannot load it ({e}); re-export") from None
        self._opened[path] = sess
        shapes = {i.name: list(i.shape) for i in sess.get_inputs()}
        rows = "k0" in shapes
        kv = shapes.get("k0") if rows else shapes.get("kv")
        want = list(md.kv_shape[2:]) if rows else list(md.kv_shape)
        tokens = shapes.get("tokens") or [None, None]
        free = isinstance(tokens[1], str) or tokens[1] is None  # a shared-k graph
        if tokens[0] != 1 or not (free or tokens[1] == k) or kv != want:
            raise BackendError(
                f"{path}: inputs {shapes} do not match graphs.json (k={k}, "
                f"kv {want}); stale or swapped files: re-export"
            )
        tok, logits = np.full((1, k), self.pad, np.int64), np.zeros((1, k, V), np.float32)
        tok_ov, logits_ov = (ort.OrtValue.ortvalue_from_numpy(a) for a in (tok, logits))
        binds = []
        if rows:
            c = md.kv_shape
            new = np.zeros((depth, 2, 1, c[3], k, c[5]), self._kv_np[0].dtype)
            b = sess.io_binding()
            b.bind_ortvalue_input("tokens", tok_ov)
            b.bind_ortvalue_input("start_pos", start_ov)
            for l in range(depth):
                b.bind_ortvalue_input(f"k{l}", self._layers[l][0])
                b.bind_ortvalue_input(f"v{l}", self._layers[l][1])
            b.bind_ortvalue_output("logits", logits_ov)
            b.bind_ortvalue_output("kv_new", ort.OrtValue.ortvalue_from_numpy(new))
            self._new[(depth, k)] = new
            binds.append(b)
        for src in range(0 if rows else len(self._kv)):
            b = sess.io_binding()
            b.bind_ortvalue_input("tokens", tok_ov)
            b.bind_ortvalue_input("start_pos", start_ov)
            b.bind_ortvalue_input("kv", self._kv[src])
            b.bind_ortvalue_output("logits", logits_ov)
            b.bind_ortvalue_output("kv_out", self._kv[(src + 1) % len(self._kv)])
            binds.append(b)
        key = (depth, k)
        self._sessions[key], self._bind[key] = sess, binds
        self._tok[key], self._logits[key] = (tok, tok_ov), (logits, logits_ov)

    def _ortvalue(self, a: np.ndarray):
        if self.device == "cpu":
            return self._ort.OrtValue.ortvalue_from_numpy(a)
        return self._ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0)

    def _tokens(self, depth: int, k: int) -> np.ndarray:
        return self._tok[(depth, k)][0]

    def _run(self, depth: int, k: int, start_pos: int) -> np.ndarray:
        self._start[0] = start_pos
        key = (depth, k)
        self._sessions[key].run_with_iobinding(self._bind[key][self._live])
        if len(self._kv) == 2:
            self._live ^= 1
        new = self._new.get(key)
        if new is not None:  # a kv-rows graph: its k new positions into the one cache
            self._kv_np[0][:depth, :, :, :, start_pos : start_pos + k] = new
        return self._logits[key][0]

    # --- KV management ----------------------------------------------------------------
    def kv(self) -> np.ndarray:
        """The live KV as a host array (a view on CPU, a copy on CUDA)."""
        ov = self._kv[self._live]
        return self._kv_np[self._live] if self.device == "cpu" else ov.numpy()

    def reset(self) -> None:
        for a, ov in zip(self._kv_np, self._kv):
            a.fill(0)
            if self.device != "cpu":
                ov.update_inplace(a)

    def snapshot(self, n_pos: int):
        return n_pos, self.kv()[..., :n_pos, :].copy()

    def restore(self, snap) -> None:
        n_pos, data = snap
        if self.device == "cpu":
            self._kv_np[self._live][..., :n_pos, :] = data
            return
        full = self.kv()
        full[..., :n_pos, :] = data
        self._kv[self._live].update_inplace(full)
