"""FlowTrtRunner: a flow policy's prefix and step loop on TensorRT, the step as a CUDA graph.

NOT RUN YET: written against the TensorRT 10/11 name-based API as the token backend
(backends/tensorrt.py) uses it, import-safe without a GPU, but never executed here (no GPU
in this session's checks). Run `tests/test_flow_runner.py`'s parity cases against it on a
GPU before relying on it.

Same surface as rtinfer.inference.flow_runner.FlowRunner (run, start, encode, integrate;
chunk [H, D] float32 in action units). Engines are built (or loaded from the engine cache,
<model>/trt_cache) by backends.tensorrt_build.EngineBuilder from the directory's prefix and
step graphs, fp32 by default. Device memory is allocated once from torch's CUDA allocator:
the observation inputs, the prefix outputs (bound as the step engines' inputs: no copy), x_t,
t, v, the integrator's scratch, a per-waypoint time mask and the committed rows. Each step
(level, i) is captured once as a CUDA graph: t <- the level's time i (times a mask that zeroes
committed waypoints), the step engine, the integrator's update of x (and committed rows put
back). A cycle: the observation and noise are copied host -> device, the prefix runs once,
the level's K graphs replay, x comes back once. A capture that fails falls back to plain
launches, counted in counters["graph_fallbacks"].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rtinfer.inference.backends.base import BackendError
from rtinfer.inference.flow_action import ActionOut, start_noise
from rtinfer.inference.flow_check import T, V, X
from rtinfer.inference.flow_schedule import DdimPlan, plan
from rtinfer.model.flow_model import FlowModelDir


@dataclass(slots=True)
class ObsIO:
    """The prefix engine's context and its observation inputs, on the device and pinned."""

    ctx: object
    dev: dict
    host: dict


@dataclass(slots=True)
class Held:
    """Device buffers the captured steps read for committed waypoints: mask [1, H_m] (0: a
    committed waypoint), keep (its rows, else 0) and mask3 (mask over [1, H_m, D_m])."""

    mask: object
    keep: object
    mask3: object


class FlowTrtRunner:
    def __init__(
        self,
        model: FlowModelDir,
        *,
        cache_dir=None,
        fp16: bool = False,
        cuda_graphs: bool = True,
        clip: bool = True,
        force_build: bool = False,
    ):
        try:
            import tensorrt as trt
            import torch
        except ImportError as e:
            raise BackendError(
                f"a flow policy on TensorRT needs tensorrt and torch (CUDA) "
                f"({e}); use --backend onnx"
            ) from None
        if not torch.cuda.is_available():
            raise BackendError("a flow policy on TensorRT needs a CUDA device; use --backend onnx")
        from rtinfer.inference.backends.tensorrt_build import EngineBuilder
        from rtinfer.inference.backends.tensorrt_plan import build_plan

        self.torch, self.model = torch, model
        builder = EngineBuilder(cache_dir or model.path / "trt_cache")
        bplan = build_plan(builder.version, fp16, False, {"float32"}, compute_capability=builder.cc)
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        engines = []
        for path in [model.prefix_path, *model.step_paths]:
            rep = builder.build(path, bplan, force=force_build)
            with open(rep["engine"], "rb") as f:
                engine = runtime.deserialize_cuda_engine(f.read())
            if engine is None:
                raise BackendError(
                    f"{rep['engine']}: TensorRT cannot deserialise it; delete it to rebuild"
                )
            engines.append(engine)
        self._runtime, self._stream = runtime, torch.cuda.Stream()
        self.counters = {"graph_replays": 0, "plain_launches": 0, "graph_fallbacks": 0}
        self.plans = [plan(model, lv["steps"]) for lv in model.levels]
        self._allocate(trt, engines, clip)
        self._graphs = {}
        if cuda_graphs:
            for level, p in enumerate(self.plans):
                for i in range(len(p.times)):
                    self._capture(level, i)

    # --- buffers ------------------------------------------------------------------------
    def _names(self, engine, mode) -> list[str]:
        return [
            engine.get_tensor_name(i)
            for i in range(engine.num_io_tensors)
            if engine.get_tensor_mode(engine.get_tensor_name(i)) == mode
        ]

    def _tensor(self, trt, engine, name: str):
        torch = self.torch
        table = {
            trt.DataType.FLOAT: torch.float32,
            trt.DataType.HALF: torch.float16,
            trt.DataType.INT32: torch.int32,
            trt.DataType.BOOL: torch.bool,
            trt.DataType.INT8: torch.int8,
        }
        for trt_name, torch_dtype in (
            ("INT64", torch.int64),
            ("UINT8", torch.uint8),
            ("BF16", torch.bfloat16),
        ):
            if hasattr(trt.DataType, trt_name):
                table[getattr(trt.DataType, trt_name)] = torch_dtype
        dt = engine.get_tensor_dtype(name)
        if dt not in table:
            raise BackendError(
                f"engine tensor {name!r} has dtype {dt}, which this runner "
                f"does not bind; export it as float32, int64, int32 or uint8"
            )
        shape = tuple(engine.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            raise BackendError(
                f"engine tensor {name!r} has dynamic shape {shape}; export the "
                f"flow graphs with static shapes"
            )
        return torch.zeros(shape, dtype=table[dt], device="cuda")

    def _allocate(self, trt, engines, clip: bool) -> None:
        torch = self.torch
        prefix, steps = engines[0], engines[1:]
        self.obs = ObsIO(prefix.create_execution_context(), {}, {})
        for name in self._names(prefix, trt.TensorIOMode.INPUT):
            dev = self._tensor(trt, prefix, name)
            self.obs.dev[name], self.obs.host[name] = dev, dev.cpu().pin_memory()
            self.obs.ctx.set_tensor_address(name, dev.data_ptr())
        self.cache = {}
        for name in self._names(prefix, trt.TensorIOMode.OUTPUT):
            self.cache[name] = self._tensor(trt, prefix, name)
            self.obs.ctx.set_tensor_address(name, self.cache[name].data_ptr())
        x0 = self._tensor(trt, steps[0], X)
        self.h_m, self.d_m = x0.shape[1], x0.shape[2]
        self.x, self.v = x0, torch.zeros_like(x0)
        self.scratch = (torch.zeros_like(x0), torch.zeros_like(x0))
        self.x_host = torch.zeros(x0.shape, dtype=torch.float32).pin_memory()
        self.held = Held(
            torch.ones((1, self.h_m), device="cuda"), torch.zeros_like(x0), torch.ones_like(x0)
        )
        self._ctx, self.t = [], []
        for engine in steps:
            ctx = engine.create_execution_context()
            t = self._tensor(trt, engine, T)
            for name in self._names(engine, trt.TensorIOMode.INPUT):
                buf = self.x if name == X else t if name == T else self.cache[name]
                ctx.set_tensor_address(name, buf.data_ptr())
            ctx.set_tensor_address(V, self.v.data_ptr())
            self._ctx.append(ctx)
            self.t.append(t)
        self._times = [torch.as_tensor(np.asarray(p.times), device="cuda") for p in self.plans]
        self.out = ActionOut(self.model, self.h_m, self.d_m, clip)  # affine, chunk

    # --- one step ------------------------------------------------------------------------
    def _step(self, level: int, i: int) -> None:
        """Step i of `level` on the runner's stream (captured once as a CUDA graph)."""
        torch = self.torch
        g = self.model.levels[level]["graph"]
        t, p = self.t[g], self.plans[level]
        if t.dim() == 2:  # per waypoint: committed waypoints at t = 0
            torch.mul(self._times[level][i].to(t.dtype).expand_as(t), self.held.mask, out=t)
        else:
            t.copy_(self._times[level][i].reshape(1).to(t.dtype))
        if not self._ctx[g].execute_async_v3(self._stream.cuda_stream):
            raise BackendError(f"TensorRT execute failed for the step graph {g}")
        if isinstance(p, DdimPlan):
            self._ddim(p, i)
        else:
            self.x.add_(self.v, alpha=float(p.dt))
        if t.dim() == 2:
            self.x.mul_(self.held.mask3).add_(self.held.keep)

    def _ddim(self, p: DdimPlan, i: int) -> None:
        sa, sb, sap, sbp = (float(c) for c in p.coef[i])
        x0, eps = self.scratch
        x, out = self.x, self.v
        if p.prediction == "epsilon":
            x0.copy_(x).sub_(out, alpha=sb).div_(sa)
            eps = out
        elif p.prediction == "sample":
            x0.copy_(out)
            eps.copy_(x).sub_(x0, alpha=sa).div_(sb)
        else:
            x0.copy_(x).mul_(sa).sub_(out, alpha=sb)
            eps.copy_(out).mul_(sa).add_(x, alpha=sb)
        if p.clip is not None:
            x0.clamp_(-p.clip, p.clip)
        x.copy_(x0).mul_(sap).add_(eps, alpha=sbp)

    def _capture(self, level: int, i: int) -> None:
        torch, stream = self.torch, self._stream
        try:
            with torch.cuda.stream(stream):  # warm-up flushes TensorRT's deferred setup
                self._step(level, i)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                self._step(level, i)
            self._graphs[(level, i)] = graph
        except Exception:  # any capture failure: plain launches for this step, counted
            self.counters["graph_fallbacks"] += 1
            torch.cuda.synchronize()

    # --- a cycle -------------------------------------------------------------------------
    def reset(self) -> None:
        """No state is kept across cycles."""

    def run(
        self,
        feeds: dict[str, np.ndarray],
        level: int = 0,
        *,
        seed=None,
        noise: np.ndarray | None = None,
        committed: np.ndarray | None = None,
    ) -> np.ndarray:
        """As FlowRunner.run: the chunk [H, D] float32 in action units (one buffer)."""
        self.start(seed, noise)
        self.encode(feeds)
        return self.integrate(level, committed)

    def start(self, seed=None, noise: np.ndarray | None = None) -> None:
        start_noise(self.model, self.x_host.numpy(), seed, noise)
        with self.torch.cuda.stream(self._stream):
            self.x.copy_(self.x_host, non_blocking=True)

    def encode(self, feeds: dict[str, np.ndarray]) -> None:
        with self.torch.cuda.stream(self._stream):
            for key, arr in feeds.items():
                np.copyto(self.obs.host[key].numpy(), arr)
                self.obs.dev[key].copy_(self.obs.host[key], non_blocking=True)
            if not self.obs.ctx.execute_async_v3(self._stream.cuda_stream):
                raise BackendError("TensorRT execute failed for the prefix graph")

    def integrate(self, level: int, committed: np.ndarray | None = None) -> np.ndarray:
        torch, stream = self.torch, self._stream
        self._commit(committed, level)
        with torch.cuda.stream(stream):
            for i in range(len(self.plans[level].times)):
                graph = self._graphs.get((level, i))
                if graph is not None:
                    graph.replay()
                    self.counters["graph_replays"] += 1
                else:
                    self._step(level, i)
                    self.counters["plain_launches"] += 1
            self.x_host.copy_(self.x, non_blocking=True)
        stream.synchronize()
        return self.out.chunk_of(self.x_host.numpy()[0])

    def _commit(self, committed, level: int) -> None:
        """The mask and kept rows the captured steps read (all free without committed)."""
        g = self.model.levels[level]["graph"]
        n = 0 if committed is None else len(committed)
        if n and (self.t[g].dim() != 2 or self.model.integrator != "euler"):
            raise ValueError(
                f"{self.model.step_paths[g]}: conditioning on committed waypoints "
                f"needs an euler step graph with per-waypoint t [1, {self.h_m}]"
            )
        keep = np.zeros((1, self.h_m, self.d_m), np.float32)  # per cycle, not per step
        mask = np.ones((1, self.h_m), np.float32)
        if n:
            D = self.model.action.dim
            self.out.to_model(np.asarray(committed, np.float32), keep[0, :n, :D])
            mask[0, :n] = 0.0
            self.x_host.numpy()[0, :n] = keep[0, :n]
        with self.torch.cuda.stream(self._stream):
            h = self.held
            h.keep.copy_(self.torch.from_numpy(keep), non_blocking=False)
            h.mask.copy_(self.torch.from_numpy(mask), non_blocking=False)
            h.mask3.copy_(h.mask[:, :, None].expand_as(h.mask3))
            if n:
                self.x.copy_(self.x_host, non_blocking=True)
