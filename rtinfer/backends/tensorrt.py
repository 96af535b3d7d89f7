"""TensorRT backend (TensorRT 10 name-based tensor API; 11 keeps this subset).

Engines are built from the exported ONNX graphs as *strongly typed* networks (the fp16
graphs already carry their casts; TensorRT 11 drops weakly typed builds and the FP16
builder flag), with SPARSE_WEIGHTS where the build offers it (2:4 weights) and a shared
timing cache. Built engines are cached under `cache_dir` keyed by the graph's sha256, the
TensorRT version and the build options, so a restart only deserialises.
Device memory comes from torch's CUDA allocator (static tensors allocated once): tokens,
start_pos, logits per engine and two KV buffers swapped after each step through
`set_tensor_address`; `execute_async_v3` runs on the backend's own CUDA stream.
Options: fp16 (True), sparse (True), cache_dir (<model>/trt_cache), workspace_mb (1024).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from rtinfer.backends.base import Backend, BackendError


class TensorRTBackend(Backend):
    name = "tensorrt"

    def _open(self, fp16: bool = True, sparse: bool = True, cache_dir=None,
              workspace_mb: int = 1024) -> None:
        try:
            import tensorrt as trt
            import torch
        except ImportError as e:
            raise BackendError(f"tensorrt backend needs tensorrt and torch (CUDA) ({e})") from None
        if not torch.cuda.is_available():
            raise BackendError("tensorrt backend needs a CUDA device; use backend 'onnx'")
        self.trt, self.torch = trt, torch
        self.dtype = "float16" if fp16 else "float32"
        if not any(key[0] == self.dtype for key in self.model.graphs):
            raise BackendError(f"no {self.dtype} graphs in {self.model.path}; export with fp16=True")
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self._cache = Path(cache_dir or self.model.path / "trt_cache")
        self._cache.mkdir(parents=True, exist_ok=True)
        self._opts = dict(sparse=sparse, workspace_mb=workspace_mb)
        dev = torch.device("cuda")
        kv_dtype = torch.float16 if fp16 else torch.float32
        V = int(self.model.config["vocab_size"])
        self._kv = [torch.zeros(self.model.kv_shape, dtype=kv_dtype, device=dev) for _ in range(2)]
        self._live = 0
        self._start = torch.zeros(1, dtype=torch.int64, device=dev)
        self._stream = torch.cuda.Stream()
        self._ctx, self._tok, self._tok_dev, self._logits = {}, {}, {}, {}
        for depth in self.depths:
            for k in self._ks[depth]:
                engine = self._engine(self.model.graph_path(self.dtype, depth, k))
                ctx = engine.create_execution_context()
                tok = np.full((1, k), self.pad, np.int64)
                tok_dev = torch.from_numpy(tok).to(dev)
                logits = torch.zeros((1, k, V), dtype=torch.float32, device=dev)
                host = torch.zeros((1, k, V), dtype=torch.float32, pin_memory=True)
                ctx.set_tensor_address("tokens", tok_dev.data_ptr())
                ctx.set_tensor_address("start_pos", self._start.data_ptr())
                ctx.set_tensor_address("logits", logits.data_ptr())
                key = (depth, k)
                self._ctx[key], self._tok[key], self._tok_dev[key] = (engine, ctx), tok, tok_dev
                self._logits[key] = (logits, host, host.numpy())

    # --- engines ----------------------------------------------------------------------
    def _engine(self, onnx_path: Path):
        trt = self.trt
        tag = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:16]
        opt = f"s{int(self._opts['sparse'])}"
        path = self._cache / f"{onnx_path.stem}_{tag}_trt{trt.__version__}_{opt}.engine"
        if not path.exists():
            path.write_bytes(self._build(onnx_path))
        engine = self._runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise BackendError(f"{path}: TensorRT cannot deserialise it; delete it to rebuild")
        return engine

    def _build(self, onnx_path: Path) -> bytes:
        trt = self.trt
        builder = trt.Builder(self._logger)
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(onnx_path.read_bytes(), path=str(onnx_path)):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f"{onnx_path}: TensorRT cannot parse it: {errs}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self._opts["workspace_mb"] << 20)
        if self._opts["sparse"] and hasattr(trt.BuilderFlag, "SPARSE_WEIGHTS"):
            config.set_flag(trt.BuilderFlag.SPARSE_WEIGHTS)
        timing = self._cache / "timing.cache"
        cache = config.create_timing_cache(timing.read_bytes() if timing.exists() else b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise BackendError(f"{onnx_path}: TensorRT engine build failed (see its log)")
        timing.write_bytes(memoryview(config.get_timing_cache().serialize()))
        return bytes(memoryview(blob))

    # --- stepping ---------------------------------------------------------------------
    def _tokens(self, depth: int, k: int) -> np.ndarray:
        return self._tok[(depth, k)]

    def _run(self, depth: int, k: int, start_pos: int) -> np.ndarray:
        torch, key = self.torch, (depth, k)
        _, ctx = self._ctx[key]
        logits, host, host_np = self._logits[key]
        with torch.cuda.stream(self._stream):
            self._tok_dev[key].copy_(torch.from_numpy(self._tok[key]), non_blocking=False)
            self._start.fill_(start_pos)
            ctx.set_tensor_address("kv", self._kv[self._live].data_ptr())
            ctx.set_tensor_address("kv_out", self._kv[self._live ^ 1].data_ptr())
            if not ctx.execute_async_v3(self._stream.cuda_stream):
                raise BackendError(f"TensorRT execute failed for depth {depth}, k {k}")
            host.copy_(logits, non_blocking=True)
        self._stream.synchronize()
        self._live ^= 1
        return host_np

    def reset(self) -> None:
        for kv in self._kv:
            kv.zero_()
        self.torch.cuda.synchronize()

    def snapshot(self, n_pos: int):
        return n_pos, self._kv[self._live][..., :n_pos, :].clone()

    def restore(self, snap) -> None:
        n_pos, data = snap
        self._kv[self._live][..., :n_pos, :].copy_(data)
        self.torch.cuda.synchronize()
