"""Decode-step time per backend and model size, against the memory-bandwidth floor.

A k=1 full-depth step must stream every weight once, so weight bytes / copy bandwidth
(numpy copy of a buffer larger than the caches, measured in this run) is the floor a
batch-1 decode step cannot beat on this host. `make_random_model` exports a random-
weight model of a named size (needs the train extra: torch, onnx; imports `models`
lazily, like the torch backend).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.inference.backends import ModelError, get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.realtime.hist import LatencyHistogram


def copy_bandwidth_gbs(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Best-of-N numpy copy bandwidth in GB/s (bytes read + bytes written)."""
    src = np.ones(nbytes // 8, np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best / 1e9


def weight_bytes(model_dir) -> int:
    """Bytes of the k=1 full-depth fp32 graph (weights dominate it), with the fp32 shared
    external weights file where the graphs keep their weights in one."""
    d = Path(model_dir)
    man = json.loads((d / "graphs.json").read_text())
    full = man["config"]["n_layer"]
    g = next(
        g for g in man["graphs"] if g["depth"] == full and g["k"] == 1 and g["dtype"] == "float32"
    )
    here = Path(g["file"]).parent  # the shared file beside this graph, not the fp16 one
    shared = [name for name in man.get("weights", {}) if Path(name).parent == here]
    return (d / g["file"]).stat().st_size + sum((d / name).stat().st_size for name in shared)


def make_random_model(size: str, out_dir) -> Path:
    """Export a random-weight model of size "demo" or "bench" with tokenizer/obs spec."""
    import torch

    from models import checkpoint
    from models.config import PolicyConfig, Vocab
    from models.export import export_all
    from models.policy import Policy
    from rtinfer.model.action_tokens import TokenizerConfig

    out = Path(out_dir)
    vocab = Vocab(n_instr=3, n_obs_bins=256, n_action_bins=256)
    cfg = getattr(PolicyConfig, size)(vocab.size)
    torch.manual_seed(0)
    model = Policy(cfg).eval()
    export_all(model, cfg, out, k_verify=8, prefix_len=[4, 28], vocab=vocab, fp16=False)
    checkpoint.save(out / "policy", model, vocab)
    TokenizerConfig(low=(-1.0,) * 4, high=(1.0,) * 4).save(out / "tokenizer.json")
    spec = {
        "format": "rtinfer-obs-tokens",
        "version": 1,
        "bins": 256,
        "fields": [{"key": "state", "slice": [0, 27], "kind": "uniform", "low": -1.0, "high": 1.0}],
        "instruction": {"key": "instruction", "length": 3, "classes": 3},
    }
    (out / "obs_tokens.json").write_text(json.dumps(spec))
    return out


def _time_steps(be, steps: int, k: int) -> dict:
    tokens = np.full(k, be.model.vocab.action_start, np.int64)
    h = LatencyHistogram()
    start = min(be.model.prefix_len, be.max_ctx - k)  # where decoding happens
    for i in range(steps + 10):
        t0 = time.perf_counter_ns()
        be.step(tokens, start, be.n_layer)
        if i >= 10:
            h.record(time.perf_counter_ns() - t0)
    p = h.percentiles_us()
    return {"p50_us": p["p50"], "p99_us": p["p99"]}


def run(model_dirs: dict, backends=("onnx", "torch"), steps: int = 200, threads: int = 1) -> dict:
    """model_dirs: {size name: model dir}. Per size and backend: k=1 decode-step and
    verify-step p50/p99 (us); per size: weight bytes and the bandwidth floor (us)."""
    bw = copy_bandwidth_gbs()
    out = {"copy_bandwidth_gbs": bw, "sizes": {}}
    for size, path in model_dirs.items():
        wb = weight_bytes(path)
        row = {"weight_bytes": wb, "floor_us": wb / (bw * 1e9) * 1e6, "backends": {}}
        for name in backends:
            opts = {"threads": threads} if name in ("onnx", "torch") else {}
            try:
                be = get_backend(name).load(path, **opts)
            except ModelError as e:
                row["backends"][name] = {"skipped": str(e)[:200]}
                continue
            k_verify = Decoder(be).k_verify
            row["backends"][name] = {
                "decode": _time_steps(be, steps, 1),
                "verify": {**_time_steps(be, steps, k_verify), "k": k_verify},
            }
            row["backends"][name]["decode_over_floor"] = row["backends"][name]["decode"][
                "p50_us"
            ] / max(row["floor_us"], 1e-9)
        out["sizes"][size] = row
    return out


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench backend`: decode-step time per backend and size against the bandwidth
    floor."""
    p = parser("backend", main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL, help="the demo-size model directory")
    p.add_argument("--steps", type=int, default=100, help="steps timed per graph")
    p.add_argument(
        "--sizes",
        nargs="+",
        default=["demo"],
        choices=["demo", "bench"],
        help="bench: also a random-weight bench-size model (~350 MB per graph)",
    )
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {"demo": a.model} if "demo" in a.sizes else {}
        if "bench" in a.sizes:
            dirs["bench"] = make_random_model("bench", f"{tmp}/bench")
        result = run(dirs, steps=a.steps)
    return emit("backend", result, a.json)


if __name__ == "__main__":
    sys.exit(main())
