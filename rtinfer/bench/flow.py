"""`rtinfer bench flow`: a flow policy's chunk, looped (prefix once, then the node runs the step
graph K times: rtinfer.inference.flow_runner) against unrolled (one ONNX graph per K with the
steps baked in), on ONNX Runtime, interleaved.

The policy is models.flow_tiny.TinyFlow (an MLP encoder and an MLP action expert over the
whole chunk) at two sizes: "tiny" (width 64, where per-step overhead dominates) and "expert"
(width 1024, where the step's own compute does). Both forms run the same weights from the
same noise with one intra-op thread; each timed call is the whole chunk (prefix and K steps;
the looped one also its affine and clip). Rounds interleave the two forms, each level in
turn, so a busy host moves both alike; medians, p99 and run counts per level, the ratio
unrolled / looped of the medians, and the 1-minute load average are reported. The chunks of
both forms are checked equal (max abs difference).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.options import emit, parser

SIZES = {"tiny": {"width": 64, "embed": 32}, "expert": {"width": 1024, "embed": 256}}
LADDER = (10, 4, 2, 1)
HORIZON, DIM = 16, 8


def _build(root: Path, size: str):
    import onnxruntime as ort

    from models.flow_package import package_flow
    from models.flow_tiny import TinyFlow, export_looped, export_unrolled
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.model.action_spec import ActionSpec
    from rtinfer.model.flow_model import FlowModelDir

    model = TinyFlow(obs_dim=4, horizon=HORIZON, dim=DIM, **SIZES[size])
    spec = ActionSpec(
        tuple(f"j{i}" for i in range(DIM)),
        ("1",) * DIM,
        (-1e3,) * DIM,
        (1e3,) * DIM,
        horizon=HORIZON,
        period_ns=50_000_000,
        start_ns=0,
    )
    prefix, step = export_looped(model, root / size / "graphs")
    package_flow(root / size / "policy", prefix, [step], list(LADDER), spec)
    runner = FlowRunner(FlowModelDir.load(root / size / "policy"))
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    unrolled = [
        ort.InferenceSession(
            str(export_unrolled(model, k, root / size / f"k{k}.onnx")),
            so,
            providers=["CPUExecutionProvider"],
        )
        for k in LADDER
    ]
    return runner, unrolled


def _time(fn) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e3


def measure(size: str, rounds: int, root: Path) -> dict:
    runner, unrolled = _build(root, size)
    rng = np.random.default_rng(0)
    state = rng.standard_normal((1, 4)).astype(np.float32)
    noise = rng.standard_normal((1, HORIZON, DIM)).astype(np.float32)
    x = np.zeros_like(noise)
    binds = []
    for sess in unrolled:  # the unrolled graphs bound once too: a fair call overhead
        b = sess.io_binding()
        b.bind_cpu_input("state", state)
        b.bind_cpu_input("noise", noise)
        b.bind_output("x", "cpu", 0, np.float32, x.shape, x.ctypes.data)
        binds.append(b)
    feeds = {"state": state}
    levels = []
    for level, (k, sess, bind) in enumerate(zip(LADDER, unrolled, binds)):
        looped = runner.run(feeds, level, noise=noise).copy()
        sess.run_with_iobinding(bind)
        diff = float(np.abs(looped - x[0]).max())
        times = {"looped": [], "unrolled": []}
        levels.append((k, sess, bind, times, diff))
    for r in range(rounds):
        for level, (_, sess, bind, times, _) in enumerate(levels):
            pair = [
                ("looped", lambda lv=level: runner.run(feeds, lv, noise=noise)),
                ("unrolled", lambda s=sess, b=bind: s.run_with_iobinding(b)),
            ]
            for name, fn in pair if r % 2 == 0 else pair[::-1]:
                times[name].append(_time(fn))
    out = []
    for k, _, _, times, diff in levels:
        row = {"steps": k, "max_abs_diff": diff}
        for name, ts in times.items():
            row[f"{name}_p50_us"] = round(float(np.percentile(ts, 50)), 1)
            row[f"{name}_p99_us"] = round(float(np.percentile(ts, 99)), 1)
            row[f"{name}_runs"] = len(ts)
        row["unrolled_over_looped_p50"] = round(row["unrolled_p50_us"] / row["looped_p50_us"], 3)
        out.append(row)
    return {"size": size, **SIZES[size], "horizon": HORIZON, "dim": DIM, "levels": out}


def run(rounds: int = 300, sizes=tuple(SIZES)) -> dict:
    with tempfile.TemporaryDirectory(prefix="rtinfer-bench-flow-") as tmp:
        results = [measure(s, rounds, Path(tmp)) for s in sizes]
    return {
        "bench": "flow",
        "rounds": rounds,
        "threads": 1,
        "load_1min": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "sizes": results,
    }


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench flow`: a flow policy looped by the node against K steps unrolled."""
    p = parser("flow", __doc__)
    p.add_argument("--rounds", type=int, default=300, help="interleaved rounds per level")
    p.add_argument(
        "--size", choices=list(SIZES), action="append", help="a policy size to run (default: all)"
    )
    a = p.parse_args(argv)
    return emit("flow", run(a.rounds, tuple(a.size or SIZES)), a.json)


if __name__ == "__main__":
    sys.exit(main())
