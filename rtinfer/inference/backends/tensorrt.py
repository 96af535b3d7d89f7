"""TensorRT backend: one engine per exported (depth, k) graph, name-based tensor I/O.

Engines come from rtinfer.inference.backends.tensorrt_build.EngineBuilder (TensorRT
10.x/11.x plan, SPARSE_WEIGHTS, timing cache, engine cache keyed by graph sha256 + TensorRT
version + GPU + flags), so a restart, or a second process on the same Jetson, only deserialises.
Device memory is owned here and allocated once from torch's CUDA allocator: per engine a
token buffer and a logits buffer, one start_pos buffer, and TWO KV buffers (kv -> kv_out
ping-pong, swapped after each step). Host side, tokens/start_pos/logits live in pinned
memory, copied asynchronously on the backend's own CUDA stream; the step synchronises that
stream once before returning. I/O dtypes are read from the engine (fp16 KV for fp16
graphs, fp32 KV for weakly typed FP16 builds).
CUDA graphs: after one warm-up `execute_async_v3`, the launch is captured on a
torch.cuda.CUDAGraph, twice per engine (one graph per KV parity, since the tensor addresses
are baked into a graph). A capture that fails falls back to plain `execute_async_v3` for
that engine and is counted in `counters["graph_fallbacks"]`.
Options: fp16 (True), sparse (True), cache_dir (<model>/trt_cache), workspace_mb (1024),
opt_level (3), cuda_graphs (True), force_build (False), precision (None; "int8" or "fp8":
the model's Q/DQ set, explicit quantization, see tensorrt_plan; FP8 refused below sm_89).
"""

from __future__ import annotations

import numpy as np

from rtinfer.inference.backends.base import Backend, BackendError

IO_NAMES = ("tokens", "start_pos", "kv", "logits", "kv_out")


class TensorRTBackend(Backend):
    name = "tensorrt"

    def _open(
        self,
        fp16: bool = True,
        sparse: bool = True,
        cache_dir=None,
        workspace_mb: int = 1024,
        opt_level: int = 3,
        cuda_graphs: bool = True,
        force_build: bool = False,
        precision: str | None = None,
    ) -> None:
        try:
            import tensorrt as trt
            import torch
        except ImportError as e:
            raise BackendError(f"tensorrt backend needs tensorrt and torch (CUDA) ({e})") from None
        if not torch.cuda.is_available():
            raise BackendError("tensorrt backend needs a CUDA device; use backend 'onnx'")
        from rtinfer.inference.backends.tensorrt_build import EngineBuilder

        self.trt, self.torch = trt, torch
        builder = EngineBuilder(
            cache_dir or self.model.path / "trt_cache",
            workspace_mb=workspace_mb,
            opt_level=opt_level,
        )
        self.build_report = builder.build_model(
            self.model, fp16=fp16, sparse=sparse, force=force_build, precision=precision
        )
        self.counters = {"graph_replays": 0, "plain_launches": 0, "graph_fallbacks": 0}
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self._stream = torch.cuda.Stream()
        self._engines, self._ctx, self._graphs = {}, {}, {}
        for g in self.build_report["graphs"].values():
            with open(g["engine"], "rb") as f:
                engine = self._runtime.deserialize_cuda_engine(f.read())
            if engine is None:
                raise BackendError(
                    f"{g['engine']}: TensorRT cannot deserialise it; delete it "
                    "(or pass force_build=True) to rebuild"
                )
            self._engines[(g["depth"], g["k"])] = engine
        self._allocate()
        if cuda_graphs:
            for key in self._ctx:
                self._capture(key)
        self.reset()

    # --- buffers ----------------------------------------------------------------------
    def _dtype(self, engine, name: str):
        trt, torch = self.trt, self.torch
        table = {
            trt.DataType.FLOAT: torch.float32,
            trt.DataType.HALF: torch.float16,
            trt.DataType.INT32: torch.int32,
        }
        for trt_name, torch_dtype in (("INT64", torch.int64), ("BF16", torch.bfloat16)):
            if hasattr(trt.DataType, trt_name):
                table[getattr(trt.DataType, trt_name)] = torch_dtype
        dt = engine.get_tensor_dtype(name)
        if dt not in table:
            raise BackendError(f"engine tensor {name!r} has unsupported dtype {dt}")
        return table[dt]

    def _check_io(self, engine, key) -> None:
        names = {engine.get_tensor_name(i) for i in range(engine.num_io_tensors)}
        if names != set(IO_NAMES):
            raise BackendError(
                f"engine {key} has I/O {sorted(names)}, expected {list(IO_NAMES)}; "
                "re-export the model with models.export"
            )
        for n in IO_NAMES:
            shape = tuple(engine.get_tensor_shape(n))
            if any(d < 0 for d in shape):
                raise BackendError(
                    f"engine {key}: {n} has dynamic shape {shape}; graphs are static"
                )
        if tuple(engine.get_tensor_shape("tokens")) != (1, key[1]):
            shape = tuple(engine.get_tensor_shape("tokens"))
            raise BackendError(f"engine {key}: tokens shape {shape}")

    def _allocate(self) -> None:
        torch, dev = self.torch, self.torch.device("cuda")
        first = next(iter(self._engines.values()))
        kv_dtype = self._dtype(first, "kv")
        self._kv = [torch.zeros(self.model.kv_shape, dtype=kv_dtype, device=dev) for _ in range(2)]
        self._live = 0
        start_dtype = self._dtype(first, "start_pos")
        self._start_host = torch.zeros(1, dtype=start_dtype).pin_memory()
        self._start = torch.zeros(1, dtype=start_dtype, device=dev)
        self._tok, self._tok_host, self._tok_dev, self._logits = {}, {}, {}, {}
        V = int(self.model.config["vocab_size"])
        for key, engine in self._engines.items():
            self._check_io(engine, key)
            if self._dtype(engine, "kv") != kv_dtype:
                raise BackendError(
                    f"engine {key}: KV dtype differs from the other engines; rebuild"
                )
            k = key[1]
            host = torch.full((1, k), self.pad, dtype=self._dtype(engine, "tokens")).pin_memory()
            tok_dev = host.to(dev)
            logits = torch.zeros((1, k, V), dtype=self._dtype(engine, "logits"), device=dev)
            out = torch.zeros((1, k, V), dtype=torch.float32).pin_memory()
            ctx = engine.create_execution_context()
            ctx.set_tensor_address("tokens", tok_dev.data_ptr())
            ctx.set_tensor_address("start_pos", self._start.data_ptr())
            ctx.set_tensor_address("logits", logits.data_ptr())
            self._ctx[key], self._tok_dev[key], self._tok_host[key] = ctx, tok_dev, host
            self._tok[key], self._logits[key] = host.numpy(), (logits, out, out.numpy())

    def _bind(self, ctx, live: int) -> None:
        ctx.set_tensor_address("kv", self._kv[live].data_ptr())
        ctx.set_tensor_address("kv_out", self._kv[live ^ 1].data_ptr())

    def _capture(self, key) -> None:
        torch, ctx, stream = self.torch, self._ctx[key], self._stream
        for live in (0, 1):
            try:
                self._bind(ctx, live)
                with torch.cuda.stream(stream):  # warm-up flushes TensorRT's deferred setup
                    if not ctx.execute_async_v3(stream.cuda_stream):
                        raise RuntimeError("warm-up execute_async_v3 returned False")
                stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                    ok = ctx.execute_async_v3(stream.cuda_stream)
                if not ok:
                    raise RuntimeError("execute_async_v3 returned False while capturing")
                self._graphs[(key, live)] = graph
            except Exception:  # any capture failure: plain launches for this engine, counted
                self.counters["graph_fallbacks"] += 1
                torch.cuda.synchronize()

    # --- stepping ---------------------------------------------------------------------
    def _tokens(self, depth: int, k: int) -> np.ndarray:
        return self._tok[(depth, k)]

    def _run(self, depth: int, k: int, start_pos: int) -> np.ndarray:
        torch, key, stream = self.torch, (depth, k), self._stream
        logits, out, out_np = self._logits[key]
        with torch.cuda.stream(stream):
            self._start_host[0] = start_pos
            self._start.copy_(self._start_host, non_blocking=True)
            self._tok_dev[key].copy_(self._tok_host[key], non_blocking=True)
            graph = self._graphs.get((key, self._live))
            if graph is not None:
                graph.replay()
                self.counters["graph_replays"] += 1
            else:
                ctx = self._ctx[key]
                self._bind(ctx, self._live)
                if not ctx.execute_async_v3(stream.cuda_stream):
                    raise BackendError(f"TensorRT execute failed for depth {depth}, k {k}")
                self.counters["plain_launches"] += 1
            out.copy_(logits, non_blocking=True)
        stream.synchronize()
        self._live ^= 1
        return out_np

    def reset(self) -> None:
        with self.torch.cuda.stream(self._stream):
            for kv in self._kv:
                kv.zero_()
        self._stream.synchronize()

    def snapshot(self, n_pos: int):
        with self.torch.cuda.stream(self._stream):
            data = self._kv[self._live][..., :n_pos, :].clone()
        self._stream.synchronize()
        return n_pos, data

    def restore(self, snap) -> None:
        n_pos, data = snap
        with self.torch.cuda.stream(self._stream):
            self._kv[self._live][..., :n_pos, :].copy_(data)
        self._stream.synchronize()
