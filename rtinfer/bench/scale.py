"""`rtinfer bench scale`: chunk time against model size, precision and method, and the largest
policy that meets the 100 ms deadline on this host.

A row is one (rung, precision, method). Chunk time is what the inference node computes per
cycle, through its own TokenRunner: the observation segment's prefill (the instruction prefix
KV-cached, as in the node) plus the 16-token chunk, on the shipped policy's recorded stream,
ONNX Runtime on `threads` threads. `step_over_floor` is the k=1 decode step (p50) over its
bandwidth floor: the precision's weight bytes over the numpy copy bandwidth measured in this
run (rtinfer.bench.backend). `floors` holds, per stage (step k=1, verify k=8, the observation
prefill), the p50 against both of this machine's floors measured in the run
(rtinfer.bench.scale_floors: weight bytes / copy bandwidth, FLOPs / the precision's matmul
GFLOP/s). `torch_eager_chunk_ms` is the same plain chunk through the torch
backend, eager, with the rung's fp32 weights (on every precision's row). Speculative rows use
the chunk-reuse drafter: measured on trained policies (the shipped one, `--trained DIR`),
`projected` on random-weight rungs from their measured prefill, verify (k=8) and step times
and the shipped policy's measured verifies and plain steps per chunk at the same precision.
The plain rows also carry the budget level that prefills and decodes at the early exit
(`exit_chunk_*`). Where a rung has KV-rows twins (models.kv_rows: the random rungs), its figures
are on them (`kv` "rows": the cache read in place, only the new positions' KV written) and
`kv_full_*` are the kv_out graphs' (the whole KV rewritten each step), timed interleaved with
them cycle by cycle and step by step, with `kv_rows_identical` over the chunks.
P (`largest_params_meeting_deadline`) is the largest measured row whose chunk p99 plus the
loop's fixed overheads (rtinfer.bench.scale_overheads) is under the deadline. Blocks for
seconds (--quick) to ~11 min (the full ladder with --sweep, exports cached, on a loaded
2-core host); exporting the rungs the first time adds ~20 min.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np

from rtinfer.bench.backend import copy_bandwidth_gbs
from rtinfer.bench.decode import token_stream
from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.bench.scale_floors import floors, matmul_gflops, precision_bytes, step_times
from rtinfer.bench.scale_models import K_VERIFY, RUNGS, SHIPPED, model_dir, params_of
from rtinfer.bench.scale_overheads import fixed_overheads
from rtinfer.inference.budget import BudgetLevel
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.directory import ModelDir, graph_dtype
from rtinfer.realtime.complaints import say
from rtinfer.realtime.deadline import DEADLINE_MS
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.wire import now_ns

PRECISIONS = ("fp32", "int8", "int4", "w8a8")  # every set the bench can time
DEFAULT_PRECISIONS = PRECISIONS[:3]  # w8a8 on request (--precisions ... w8a8)
SIZES = (SHIPPED, *RUNGS)


def _ms(h: LatencyHistogram) -> tuple[float, float]:
    p = h.percentiles_us()
    return p["p50"] / 1e3, p["p99"] / 1e3


def chunks(
    md: ModelDir,
    cycles: list,
    *,
    backend: str = "onnx",
    drafter: str = "none",
    depth: int | None = None,
    warmup: int = 2,
    **opts,
) -> dict:
    """Time one chunk per cycle through a TokenRunner (capture stamps one period apart, so the
    chunk drafter drafts from the previous cycle). Returns chunk and prefill p50/p99 (ms, the
    first `warmup` cycles not recorded), per-chunk verifies and plain steps, the chunks."""
    return arms(
        md, cycles, {None: opts}, backend=backend, drafter=drafter, depth=depth, warmup=warmup
    )[None]


def arms(
    md: ModelDir,
    cycles: list,
    variants: dict,
    *,
    backend: str = "onnx",
    drafter: str = "none",
    depth: int | None = None,
    warmup: int = 2,
) -> dict:
    """`chunks` for each variant (name -> backend options) on the same cycles, interleaved:
    every cycle runs on each variant's runner, in an order that alternates cycle by cycle, so
    a change of load touches every variant alike. Returns {name: chunks' result}."""
    runners = {
        n: TokenRunner(md, backend=backend, backend_opts=o, drafter=drafter)
        for n, o in variants.items()
    }
    level = BudgetLevel(
        depth or md.n_layer, K_VERIFY - 1 if drafter != "none" else 0, md.tokenizer.horizon
    )
    acc = {
        n: {
            "chunk": LatencyHistogram(),
            "prefill": LatencyHistogram(),
            "verifies": [],
            "steps": [],
            "outs": [],
            "best": float("inf"),
        }
        for n in runners
    }
    for i, (instr, obs) in enumerate(cycles):
        for n in list(runners) if i % 2 else list(runners)[::-1]:
            runner, a = runners[n], acc[n]
            t0 = now_ns()
            bins, first_ns = runner.run(instr, obs, i * md.tokenizer.period_ns, level)
            t1 = now_ns()
            a["outs"].append(bins.copy())
            if i >= warmup:
                a["chunk"].record(t1 - t0)
                a["best"] = min(a["best"], (t1 - t0) / 1e6)
                a["prefill"].record(first_ns - t0)
                st = runner.decoder.stats
                a["verifies"].append(st.verifies)
                a["steps"].append(st.target_passes - st.verifies)
    return {
        n: {
            "chunk_ms": _ms(a["chunk"]),
            "chunk_min_ms": a["best"],
            "prefill_ms": _ms(a["prefill"]),
            "verifies": a["verifies"],
            "plain_steps": a["steps"],
            "bins": np.array(a["outs"]),
            "runner": runners[n],
        }
        for n, a in acc.items()
    }


def has_kv_rows(md: ModelDir, precision: str) -> bool:
    """The directory lists KV-rows twins (models.kv_rows) of this precision's graphs."""
    return any(g["dtype"] == graph_dtype(precision) for g in md.manifest.get("kv_rows", []))


def project(parts: dict, spec: dict) -> tuple[float, float]:
    """Speculative chunk p50/p99 (ms) from a rung's measured parts and a trained policy's
    verifies and plain steps per chunk: prefill + verifies x verify + plain steps x step
    (p50 from medians; p99 from p99 counts and p99 times, an upper estimate)."""
    v, s = np.asarray(spec["verifies"]), np.asarray(spec["plain_steps"])
    p50 = (
        parts["prefill_ms"][0]
        + np.median(v) * parts["verify_ms"][0]
        + np.median(s) * parts["step_ms"][0]
    )
    p99 = (
        parts["prefill_ms"][1]
        + np.percentile(v, 99) * parts["verify_ms"][1]
        + np.percentile(s, 99) * parts["step_ms"][1]
    )
    return float(p50), float(p99)


def measure_rung(
    name: str,
    path,
    precisions,
    cycles,
    *,
    runs: int,
    steps: int,
    threads: int,
    bandwidth: float,
    gflops: dict,
    trained: bool,
    spec_ref: dict,
    torch_runs: int,
    log=print,
) -> list[dict]:
    """Every row of one rung: plain per precision (and its exit level), speculative measured
    (trained) or projected (from spec_ref[precision]); fills spec_ref when trained."""
    md = ModelDir.load(path)
    params, rows = params_of(path), []
    eager = chunks(md, cycles[: torch_runs + 2], backend="torch", threads=threads, device="cpu")
    eager_ms = eager.pop("chunk_ms")[0]
    del eager
    exit_depth = max(md.config.get("exits") or [0])
    for prec in precisions:
        if graph_dtype(prec) not in md.dtypes:
            log(f"scale: {path} has no {prec} graphs; its {prec} rows are left out")
            continue
        opts = {"threads": threads, "precision": prec}
        # the KV read in place (kv_rows twins) against the whole KV rewritten each step, interleaved
        rows_kv = has_kv_rows(md, prec)
        variants = (
            {"rows": {**opts, "kv_rows": True}, "full": {**opts, "kv_rows": False}}
            if rows_kv
            else {"full": opts}
        )
        timed = arms(md, cycles[: runs + 2], variants)
        plain = timed["rows" if rows_kv else "full"]
        bes = {n: t.pop("runner").backend for n, t in timed.items()}
        parts = {
            n: {"prefill_ms": timed[n]["prefill_ms"], "step_ms": step, "verify_ms": verify}
            for (n, step), verify in zip(
                step_times(bes, steps, 1).items(), step_times(bes, steps, K_VERIFY).values()
            )
        }
        del bes
        floor_ms = precision_bytes(path, prec) / (bandwidth * 1e9) * 1e3
        kv_full = {}
        if rows_kv:
            full = timed["full"]
            kv_full = {
                "kv_full_chunk_p50_ms": full["chunk_ms"][0],
                "kv_full_chunk_p99_ms": full["chunk_ms"][1],
                "kv_full_chunk_min_ms": full["chunk_min_ms"],
                "kv_full_step_p50_ms": parts["full"]["step_ms"][0],
                "kv_full_verify_p50_ms": parts["full"]["verify_ms"][0],
                "kv_full_prefill_p50_ms": full["prefill_ms"][0],
                "kv_rows_identical": bool((full["bins"] == plain["bins"]).all()),
            }
        parts = parts["rows" if rows_kv else "full"]
        stage_ms = {
            "step": parts["step_ms"][0],
            "verify": parts["verify_ms"][0],
            "prefill": plain["prefill_ms"][0],
        }
        stage_k = {"step": 1, "verify": K_VERIFY, "prefill": len(cycles[0][1]) + 1}
        base = {
            "rung": name,
            "params": params,
            "precision": prec,
            "runs": runs,
            "kv": "rows" if rows_kv else "full",
            "step_over_floor": parts["step_ms"][0] / floor_ms,
            "floor_ms": floor_ms,
            "torch_eager_chunk_ms": eager_ms,
            "torch_eager_weights": "fp32",
            "floors": floors(
                md.config,
                precision_bytes(path, prec),
                bandwidth,
                gflops[prec],
                stage_ms,
                stage_k,
                {"step": parts["step_ms"][2], "verify": parts["verify_ms"][2]},
            ),
            **{f"{k[:-3]}_p50_ms": v[0] for k, v in parts.items()},
            **{f"{k[:-3]}_p99_ms": v[1] for k, v in parts.items()},
        }
        del timed
        row = {
            **base,
            "method": "plain",
            "chunk_p50_ms": plain["chunk_ms"][0],
            "chunk_p99_ms": plain["chunk_ms"][1],
            "chunk_min_ms": plain["chunk_min_ms"],
            "projected": False,
            **kv_full,
        }
        if exit_depth and md.graphs.get((graph_dtype(prec), exit_depth, len(cycles[0][1]) + 1)):
            ex = chunks(md, cycles[: runs + 2], depth=exit_depth, **opts)
            row.update(
                exit_depth=exit_depth,
                exit_chunk_p50_ms=ex["chunk_ms"][0],
                exit_chunk_p99_ms=ex["chunk_ms"][1],
            )
            del ex
        rows.append(row)
        if trained:
            spec = chunks(md, cycles[: runs + 2], drafter="chunk", **opts)
            spec_ref.setdefault(
                prec,
                {"source": name, "verifies": spec["verifies"], "plain_steps": spec["plain_steps"]},
            )
            p50, p99 = spec["chunk_ms"]
            extra = {
                "identical": bool((spec["bins"] == plain["bins"]).all()),
                "chunk_min_ms": spec["chunk_min_ms"],
                "verifies_per_chunk": float(np.mean(spec["verifies"])),
            }
            del spec
        else:
            p50, p99 = project(parts, spec_ref[prec])
            extra = {"projected_from": spec_ref[prec]["source"]}
        rows.append(
            {
                **base,
                "method": "speculative",
                "chunk_p50_ms": p50,
                "chunk_p99_ms": p99,
                "projected": not trained,
                **extra,
            }
        )
        gc.collect()
    return rows


def largest_meeting(
    rows: list[dict],
    overhead_ms: float,
    key: str = "chunk_p99_ms",
    deadline_ms: float = DEADLINE_MS,
) -> int | None:
    ok = [
        r["params"]
        for r in rows
        if not r["projected"] and r.get(key) is not None and r[key] + overhead_ms < deadline_ms
    ]
    return max(ok) if ok else None


def check_sizes(sizes) -> None:
    """ValueError unless the ladder has the shipped policy's rung, which the projected
    speculative rows need."""
    if SHIPPED not in sizes:
        raise ValueError(
            f"--sizes must include {SHIPPED} (the shipped policy): the projected "
            f"speculative rows take its measured verifies per chunk; add {SHIPPED}"
        )


def run(
    sizes=SIZES,
    precisions=DEFAULT_PRECISIONS,
    *,
    runs: int = 30,
    steps: int = 100,
    threads: int = 1,
    trained=(),
    shipped=DEFAULT_MODEL,
    overheads_report=None,
    torch_runs: int | None = None,
    transport_messages: int = 1000,
    log=print,
) -> dict:
    check_sizes(sizes)
    ship = ModelDir.load(shipped)
    n = max(runs, torch_runs or 0) + 2
    cycles = list(token_stream(ship, n, 0, ship.path / "stream.npz"))
    while len(cycles) < n:  # a short stream repeats, in order
        cycles += cycles[: n - len(cycles)]
    bandwidth = copy_bandwidth_gbs()
    gflops = matmul_gflops(precisions, threads)
    spec_ref: dict = {}
    ladder = [(s, s == SHIPPED) for s in sizes] + [(str(t), True) for t in trained]
    ladder.sort(key=lambda x: (not x[1], x[0] != SHIPPED))  # trained first: they feed projections
    rows = []
    for name, is_trained in ladder:
        path = (
            Path(name)
            if name not in sizes
            else model_dir(name, shipped=shipped, log=log, extra=precisions)
        )
        log(f"scale: timing {Path(name).name} ({', '.join(precisions)})")
        rows += measure_rung(
            Path(name).name if is_trained and name != SHIPPED else name,
            path,
            precisions,
            cycles,
            runs=runs,
            steps=steps,
            threads=threads,
            bandwidth=bandwidth,
            gflops=gflops,
            trained=is_trained,
            spec_ref=spec_ref,
            torch_runs=torch_runs or max(2, runs // 5),
            log=log,
        )
    rows.sort(key=lambda r: (r["params"], PRECISIONS.index(r["precision"]), r["method"]))
    over = fixed_overheads(ship, report=overheads_report, messages=transport_messages)
    return {
        "deadline_ms": DEADLINE_MS,
        "rows": rows,
        "largest_params_meeting_deadline": largest_meeting(rows, over["total_ms"]),
        "largest_params_meeting_deadline_at_exit": largest_meeting(
            rows, over["total_ms"], "exit_chunk_p99_ms"
        ),
        # the fastest chunk of each row: what this host does when nothing else runs
        "largest_params_best_chunk_under_deadline": largest_meeting(
            rows, over["total_ms"], "chunk_min_ms"
        ),
        "fixed_overheads_ms": over["total_ms"],
        "overheads": over,
        "copy_bandwidth_gbs": bandwidth,
        "matmul_gflops": gflops,
        "threads": threads,
        "backend": "onnx",
        "runs": runs,
        "steps": steps,
        "stream": str(ship.path / "stream.npz"),
        "load_avg": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench scale`: chunk time against model size, precision and method."""
    p = parser("scale", main.__doc__)
    p.add_argument(
        "--sizes",
        nargs="+",
        default=list(SIZES),
        choices=list(SIZES) + ["tiny"],
        help="ladder rungs (1M is the shipped policy; the rest random weights, "
        "exported once into ~/.cache/rtinfer/scale)",
    )
    p.add_argument("--precisions", nargs="+", default=list(DEFAULT_PRECISIONS), choices=PRECISIONS)
    p.add_argument("--runs", type=int, default=30, help="chunks timed per row")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime / torch intra-op threads")
    p.add_argument(
        "--trained",
        nargs="*",
        default=[],
        metavar="DIR",
        help="more trained model directories: measured speculative rows",
    )
    p.add_argument(
        "--overheads-report",
        default=None,
        metavar="JSON",
        help="a monitor report (rtinfer demo --report) to take the loop's "
        "transport and apply delays from (default: measured here)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small subset for a test: 1M and a tiny rung, fp32 and int8, 6 runs",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="also how chunk time grows with H, D, observation and instruction "
        "length (rtinfer.bench.scale_sweep)",
    )
    p.add_argument("--sweep-size", default="30M", choices=list(RUNGS) + ["tiny"])
    p.add_argument("--sweep-precision", default="int4", choices=PRECISIONS)
    p.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="chunk time against parameters per precision (and PNG's -sweep plot)",
    )
    a = p.parse_args(argv)
    try:
        check_sizes(a.sizes)
    except ValueError as e:
        p.error(str(e))
    kw = dict(
        runs=a.runs, threads=a.threads, trained=a.trained, overheads_report=a.overheads_report
    )
    if a.quick:
        a.sizes, a.precisions, a.sweep_size = [SHIPPED, "tiny"], ["fp32", "int8"], "tiny"
        kw.update(runs=6, steps=20, torch_runs=2, transport_messages=200)
    log = lambda msg: say(None, msg)  # noqa: E731 (stdout carries the JSON)
    result = run(a.sizes, a.precisions, log=log, **kw)
    if a.sweep:
        from rtinfer.bench.scale_sweep import sweep

        result["sweep"] = sweep(
            a.sweep_size, a.sweep_precision, runs=kw["runs"], threads=a.threads, log=log
        )
    if a.plot:
        from rtinfer.bench.scale_figures import plot

        plot(result, a.plot)
    if not a.json:
        from rtinfer.bench.scale_figures import print_table

        print_table(result)
        return 0
    return emit("scale", result, True)


if __name__ == "__main__":
    sys.exit(main())
