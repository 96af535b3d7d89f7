"""ONNX Runtime sessions of a model's batched step graphs (models.export_batched) at one batch
size, with that batch's KV cache: row b holds one robot's sequence for the cycle it is in.

    rows = OnnxRows(model_dir, batch=4, threads=1)
    rows.tokens(6, 8)[:] = ...; rows.start[:] = ...; logits = rows.run(6, 8)  # (4, 8, V)

The cache is one array (n_layer, 2, B, n_head, max_ctx, head_dim); each graph reads the
layers it runs as per-layer views (bound once, no copy) and returns only the new positions'
KV, which `run` writes into each row's window. Every buffer is allocated and bound at load:
a step allocates nothing. CPU only (the batched graphs are fp32). Not thread-safe.
"""

from __future__ import annotations

import numpy as np

from rtinfer.inference.backends.base import BackendError
from rtinfer.model.directory import ModelDir


class OnnxRows:
    def __init__(self, model: ModelDir, batch: int, *, threads: int = 1, spin: bool | None = None):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise BackendError(
                f"onnxruntime is not installed ({e}); pip install onnxruntime"
            ) from None
        self.model, self.batch = model, int(batch)
        c = model.config
        self.n_layer, self.max_ctx = model.n_layer, model.max_ctx
        self.pad = model.vocab.special("PAD")
        self.cache = np.zeros(
            (c["n_layer"], 2, batch, c["n_head"], c["max_ctx"], c["n_embd"] // c["n_head"]),
            np.float32,
        )
        self.start = np.zeros(batch, np.int64)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = int(threads), 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if spin is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        V = int(c["vocab_size"])
        start_ov = ort.OrtValue.ortvalue_from_numpy(self.start)
        views = [
            [ort.OrtValue.ortvalue_from_numpy(self.cache[l, j]) for j in range(2)]
            for l in range(self.n_layer)
        ]
        self._sessions, self._bind, self._tok, self._logits, self._new = {}, {}, {}, {}, {}
        self.ks: dict[int, list[int]] = {}
        for (b, depth, k), g in sorted(model.batched.items()):
            if b != batch:
                continue
            path = model.path / g["file"]
            try:
                sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            except Exception as e:  # ORT raises its own untyped errors
                raise BackendError(
                    f"{path}: onnxruntime cannot load it ({e}); re-export "
                    "(python -m models.export_batched)"
                ) from None
            tok = np.full((batch, k), self.pad, np.int64)
            logits = np.zeros((batch, k, V), np.float32)
            new = np.zeros(
                (depth, 2, batch) + self.cache.shape[3:4] + (k,) + self.cache.shape[5:], np.float32
            )
            bind = sess.io_binding()
            bind.bind_ortvalue_input("tokens", ort.OrtValue.ortvalue_from_numpy(tok))
            bind.bind_ortvalue_input("start_pos", start_ov)
            for l in range(depth):
                bind.bind_ortvalue_input(f"k{l}", views[l][0])
                bind.bind_ortvalue_input(f"v{l}", views[l][1])
            bind.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
            bind.bind_ortvalue_output("kv_new", ort.OrtValue.ortvalue_from_numpy(new))
            key = (depth, k)
            self._sessions[key], self._bind[key] = sess, bind
            self._tok[key], self._logits[key], self._new[key] = tok, logits, new
            self.ks.setdefault(depth, []).append(k)
        if not self._sessions:
            raise BackendError(
                f"{model.path}: no batch-{batch} graphs in graphs.json; export "
                "them with python -m models.export_batched"
            )
        self._views = views  # keep the OrtValues (and so the bindings' memory) alive

    def has_graph(self, depth: int, k: int) -> bool:
        return (depth, k) in self._sessions

    def tokens(self, depth: int, k: int) -> np.ndarray:
        """The (B, k) token buffer the next run(depth, k) reads."""
        return self._tok[(depth, k)]

    def run(self, depth: int, k: int) -> np.ndarray:
        """Run graph (depth, k) on every row at self.start; write each row's new KV into its
        window [start[b], start[b] + k) (the caller keeps that within max_ctx). Returns the
        logits (B, k, V), a reused buffer."""
        key = (depth, k)
        self._sessions[key].run_with_iobinding(self._bind[key])
        new, cache = self._new[key], self.cache
        for b in range(self.batch):
            s = int(self.start[b])
            cache[:depth, :, b, :, s : s + k] = new[:, :, b]
        return self._logits[key]

    def snapshot(self, row: int, n_pos: int) -> np.ndarray:
        """Copy of row's KV at positions [0, n_pos), every layer: (L, 2, H, n_pos, hd)."""
        return self.cache[:, :, row, :, :n_pos].copy()

    def restore(self, row: int, snap: np.ndarray) -> None:
        self.cache[:, :, row, :, : snap.shape[3]] = snap
