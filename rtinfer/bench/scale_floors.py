"""How close a step graph runs to this machine: its bandwidth floor and its compute floor.

A k-token step of a policy must stream its weights once and do its multiply-adds, so it
cannot beat either of two floors, both measured in the same run as the step:
- bandwidth floor: the graph set's weight bytes / copy bandwidth (rtinfer.bench.backend: a
  STREAM-style numpy copy of 256 MiB, read + write bytes, best of N);
- compute floor: the step's FLOPs / the GFLOP/s of the matmul kernel the graphs run (ONNX
  Runtime's MatMul for fp32, MatMulNBits at models.quantise's settings for int8/int4), one
  thread, a 1024 x 4096 weight on 32 rows (compute-bound: the kernel's best rate), best of N.
FLOPs count the model's own work: 2 per weight per token through the blocks and the LM head,
plus attention over the static max_ctx cache; the graphs' mask and copy ops are not floor.
A step is at the machine's limit when its time over max(floors) is near 1. On a CPU a k=8
verify is compute-bound where a k=1 step is bandwidth-bound, so the verify's floor is up to
k times the step's; on a GPU both are bandwidth-bound and a verify costs about a step.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.backend import weight_bytes
from rtinfer.model.directory import ModelDir, graph_dtype
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.wire import now_ns

RATE_K, RATE_N, RATE_ROWS = 1024, 4096, 32


def step_flops(config: dict, k: int, depth: int | None = None) -> float:
    """FLOPs of a k-token step at `depth` (default full): 2 per weight per token through the
    blocks' four Linear layers (12 C^2 a layer) and the LM head, and q.K and p.V over max_ctx."""
    c, t = int(config["n_embd"]), int(config["max_ctx"])
    d = int(depth or config["n_layer"])
    weights = d * 12 * c * c + c * int(config["vocab_size"])
    return float(2 * k * weights + 4 * d * k * t * c)


def _matmul_graph(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((RATE_K, RATE_N)).astype(np.float32) * 0.02
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "rate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", RATE_K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", RATE_N])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def matmul_gflops(
    precisions=("fp32", "int8", "int4"), threads: int = 1, repeats: int = 30
) -> dict[str, float]:
    """{precision: GFLOP/s} of ONNX Runtime's matmul kernel for that precision's graphs, on
    RATE_ROWS rows (best of `repeats`). Blocks for about a second."""
    import onnxruntime as ort

    from models.quantise import quantise_as  # the graphs' own settings

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    x = np.random.default_rng(1).standard_normal((RATE_ROWS, RATE_K)).astype(np.float32)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "fp32.onnx"
        _matmul_graph(src)
        for prec in precisions:
            path = src if prec == "fp32" else Path(tmp) / f"{prec}.onnx"
            if prec != "fp32":
                quantise_as(src, path, prec)
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                sess.run(None, {"x": x})
                best = min(best, time.perf_counter() - t0)
            out[prec] = 2 * RATE_ROWS * RATE_K * RATE_N / best / 1e9
    return out


def precision_bytes(path, precision: str) -> int:
    """Weight bytes a k=1 full-depth step of this precision streams (graph + its shared file)."""
    if precision == "fp32":
        return weight_bytes(path)
    md = ModelDir.load(path, check_hashes=False)
    g = md.graphs[(graph_dtype(precision), md.n_layer, 1)]
    folder = (md.path / g["file"]).parent
    shared = [n for n in md.manifest.get("weights", {}) if (md.path / n).parent == folder]
    return (md.path / g["file"]).stat().st_size + sum((md.path / n).stat().st_size for n in shared)


def interleaved_steps(runs: dict, steps: int) -> dict:
    """runs: key -> (backend, k). {key: (p50, p99, cpu p50) ms} of each k-token full-depth
    step at the decode position, every key once per round, the order reversed every other
    round (the first 10 rounds not recorded). cpu: the calling thread's CPU time (ONNX Runtime
    at one thread computes on it), which leaves out the time the host gave other processes."""
    hists = {key: LatencyHistogram() for key in runs}
    cpu: dict = {key: [] for key in runs}
    toks = {key: np.full(k, be.model.vocab.action_start, np.int64) for key, (be, k) in runs.items()}
    for i in range(steps + 10):
        for key in list(runs) if i % 2 else list(runs)[::-1]:
            be, k = runs[key]
            t0, c0 = now_ns(), time.thread_time_ns()
            be.step(toks[key], min(be.model.prefix_len, be.max_ctx - k), be.n_layer)
            if i >= 10:
                hists[key].record(now_ns() - t0)
                cpu[key].append(time.thread_time_ns() - c0)
    return {
        key: (
            h.percentiles_us()["p50"] / 1e3,
            h.percentiles_us()["p99"] / 1e3,
            float(np.median(cpu[key])) / 1e6,
        )
        for key, h in hists.items()
    }


def stage_times(be, ks: dict[str, int], steps: int = 100) -> dict:
    """{stage: (p50, p99, cpu p50) ms} of each k-token step (ks: stage -> k) on one backend,
    interleaved (see interleaved_steps)."""
    return interleaved_steps({s: (be, k) for s, k in ks.items()}, steps)


def step_times(backends: dict, steps: int, k: int) -> dict:
    """{name: (p50, p99, cpu p50) ms} of a k-token step on each backend, interleaved (see
    interleaved_steps)."""
    return interleaved_steps({n: (be, k) for n, be in backends.items()}, steps)


def floors(
    config: dict,
    weight_bytes: int,
    bandwidth_gbs: float,
    gflops: float,
    measured_ms: dict[str, float],
    ks: dict[str, int],
    cpu_ms: dict[str, float] | None = None,
) -> dict:
    """Per stage (name -> k tokens, e.g. {"step": 1, "verify": 8}): the measured time (ms),
    both floors (ms) and the measured time over each and over the higher one; with cpu_ms
    (the thread's CPU time of the same steps) also that over the higher floor."""
    out = {}
    for stage, k in ks.items():
        bw = weight_bytes / (bandwidth_gbs * 1e9) * 1e3
        comp = step_flops(config, k) / (gflops * 1e9) * 1e3
        ms = measured_ms[stage]
        out[stage] = {
            "k": k,
            "measured_ms": ms,
            "bandwidth_floor_ms": bw,
            "compute_floor_ms": comp,
            "over_bandwidth": ms / bw,
            "over_compute": ms / comp,
            "over_floor": ms / max(bw, comp),
            "bound": "compute" if comp > bw else "bandwidth",
        }
        if cpu_ms and stage in cpu_ms:
            out[stage].update(
                measured_cpu_ms=cpu_ms[stage], cpu_over_floor=cpu_ms[stage] / max(bw, comp)
            )
    return out
