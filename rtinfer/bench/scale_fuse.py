"""What each of ONNX Runtime's transformer fusions (models.fuse) does to a rung's step and verify.

    python -m rtinfer.bench.scale_fuse --size 100M --precision int4 --steps 100

Each variant (no offline fusion, each fusion alone, all of them) is a copy of the rung's cached
directory (hard links; models.fuse replaces the files it rewrites) with that set fused. Per
variant: the nodes of the full-depth k=1 step and k=8 verify graphs the backend runs (the
KV-rows twins where the rung has them), as written and after ONNX Runtime's own session
optimizer (level all, as the backend loads them); the step and verify p50/p99, every (variant,
stage) pair timed interleaved step by step (wall and the thread's CPU time); the ratios to the
unfused variant; and whether greedy chunks on the recorded stream are token-identical to the
unfused graphs' (random weights give near-ties, which a last-bit change can flip).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rtinfer.bench.decode import prefix_stream
from rtinfer.bench.options import DEFAULT_MODEL
from rtinfer.bench.scale_floors import interleaved_steps
from rtinfer.bench.scale_models import K_VERIFY, RUNGS, TINY, cache_root, model_dir
from rtinfer.inference.backends import get_backend
from rtinfer.model.directory import graph_dtype
from rtinfer.realtime.complaints import say

VARIANTS = {
    "unfused": (),
    "skip_layer_norm": ("skip_layer_norm",),
    "gelu": ("gelu",),
    "all": ("skip_layer_norm", "gelu"),
}


def fused_copy(src: Path, dst: Path, dtype: str, fusions) -> Path:
    """dst: src hard-linked file by file (weights files copied), then its `dtype` set fused (once;
    reused after)."""
    from models.fuse import fuse_dir

    if (dst / ".complete").exists():
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, copy_function=os.link)
    for w in dst.rglob("weights.bin"):  # onnx refuses external data behind a hard link
        w.unlink()
        shutil.copyfile(src / w.relative_to(dst), w)
    if fusions:
        fuse_dir(dst, (dtype,), fusions)
    (dst / ".complete").write_text("")
    return dst


def session_nodes(path: Path) -> int:
    """Nodes of a graph after ONNX Runtime's session optimizer at level all."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        so.optimized_model_filepath = str(Path(tmp) / "o.onnx")
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "o.bin"
        )
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return len(onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node)


def graph_file(be, k: int) -> Path:
    md = be.model
    rows = {
        (int(g["depth"]), int(g["k"])): g["file"]
        for g in md.manifest.get("kv_rows", [])
        if g["dtype"] == be.dtype
    }
    f = rows.get((md.n_layer, k))
    return md.path / f if f else md.graph_path(be.dtype, md.n_layer, k)


def interleaved(bes: dict, ks: dict, steps: int) -> dict:
    """{variant: {stage: (p50, p99, cpu p50) ms}}: every (variant, stage) pair once per round
    (rtinfer.bench.scale_floors' interleaved timer)."""
    times = interleaved_steps(
        {(v, s): (be, k) for v, be in bes.items() for s, k in ks.items()}, steps
    )
    out: dict = {v: {} for v in bes}
    for (v, s), t in times.items():
        out[v][s] = t
    return out


def run(
    size: str = "100M",
    precision: str = "int4",
    steps: int = 100,
    cycles: int = 10,
    threads: int = 1,
    variants=tuple(VARIANTS),
    log=print,
) -> dict:
    from models.quantise import greedy_chunks

    src = model_dir(size, log=log)
    dtype = graph_dtype(precision)
    root = cache_root() / "fused" / src.name
    dirs = {
        v: src if not VARIANTS[v] else fused_copy(src, root / v, dtype, VARIANTS[v])
        for v in variants
    }
    load0 = os.getloadavg()
    bes = {
        v: get_backend("onnx").load(d, precision=precision, threads=threads)
        for v, d in dirs.items()
    }
    ks = {"step": 1, "verify": K_VERIFY}
    nodes = {
        v: {
            s: {"written": None, "session": session_nodes(graph_file(be, k))} for s, k in ks.items()
        }
        for v, be in bes.items()
    }
    import onnx

    for v, be in bes.items():
        for s, k in ks.items():
            nodes[v][s]["written"] = len(
                onnx.load(str(graph_file(be, k)), load_external_data=False).graph.node
            )
    times = interleaved(bes, ks, steps)
    md = bes["unfused"].model if "unfused" in bes else next(iter(bes.values())).model
    prefixes = list(prefix_stream(md, cycles, 0, Path(DEFAULT_MODEL) / "stream.npz"))
    outs = {v: greedy_chunks(be, prefixes) for v, be in bes.items()}
    base = "unfused" if "unfused" in bes else None
    per = {}
    for v in bes:
        per[v] = {
            "fusions": list(VARIANTS[v]),
            "nodes": nodes[v],
            **{f"{s}_p50_ms": t[0] for s, t in times[v].items()},
            **{f"{s}_p99_ms": t[1] for s, t in times[v].items()},
            **{f"{s}_cpu_p50_ms": t[2] for s, t in times[v].items()},
            "verify_over_step": times[v]["verify"][0] / times[v]["step"][0],
        }
        if base:
            per[v].update(
                {f"{s}_p50_ratio": times[v][s][0] / times[base][s][0] for s in ks},
                **{f"{s}_cpu_p50_ratio": times[v][s][2] / times[base][s][2] for s in ks},
                identical=bool((outs[v] == outs[base]).all()),
            )
    return {
        "size": size,
        "precision": precision,
        "steps": steps,
        "threads": threads,
        "greedy_cycles": len(prefixes),
        "variants": per,
        "load_avg": [list(load0), list(os.getloadavg())],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100M", choices=[*RUNGS, *TINY])
    ap.add_argument("--precision", default="int4", choices=["fp32", "int8", "int4", "w8a8"])
    ap.add_argument("--steps", type=int, default=100, help="rounds of every (variant, stage)")
    ap.add_argument("--cycles", type=int, default=10, help="greedy chunks compared per variant")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    a = ap.parse_args(argv)
    result = run(
        a.size, a.precision, a.steps, a.cycles, variants=a.variants, log=lambda m: say(None, m)
    )
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
