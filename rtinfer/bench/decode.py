"""Speculative vs plain decoding throughput on one model, measured in the same run.

Cycles replay consecutive real observations: `stream=` (an .npz with instruction_tokens
(N, C) and obs_tokens (N, L), one row per policy period, as recorded from the cell), else
the model directory's `stream.npz` when it ships one, else a slowly drifting synthetic
stream (each cycle moves a few random observation tokens by one bin: out of distribution
for a trained policy, so acceptance rates there say little). Every drafter's output is
compared token for token with plain greedy (`identical`). The drafters: self-speculative
(the shallowest exit), chunk reuse, the distilled plan drafter ("plan": with `--plan-drafter
FILE`, by default the one shipped for the shipped policy) and a draft model
(`--draft-model DIR`). `--precision int8` runs the same on
that graph set; several precisions (`--precision fp32 int8 int4`) compare their plain greedy
decode steps instead (`precision_run`), the first being the baseline. `floors` (ONNX Runtime)
holds the k=1 step and the k_verify verify, timed interleaved after the chunks, against this
machine's bandwidth and compute floors measured in the same run (rtinfer.bench.scale_floors),
and `in_chunk_step_ms`: plain greedy's decode phase over its steps.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.backend import copy_bandwidth_gbs
from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.bench.scale_floors import floors, matmul_gflops, precision_bytes, stage_times
from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter, EarlyExitDrafter
from rtinfer.inference.model_drafter import ModelDrafter
from rtinfer.inference.plan_drafter import PlanDrafter, PlanMLP
from rtinfer.model.sequence import build_prefix
from rtinfer.model.zoo import zoo_model

# the plan drafter distilled from the shipped policy (models.distil_plan), beside its draft model
SHIPPED_PLAN_DRAFTER = zoo_model("conveyor-v1-draft") / "plan_drafter.npz"


def token_stream(md, cycles: int, seed: int, stream=None):
    """(instruction, observation) raw tokens per cycle: `stream` (an .npz with those two
    arrays, e.g. one episode written by examples/conveyor_sorting/collect.py), else the
    model's recorded stream.npz if it ships one, else the synthetic drifting stream."""
    recorded = Path(stream) if stream else md.path / "stream.npz"
    if stream and not recorded.exists():
        raise FileNotFoundError(f"{stream}: no such observation stream")
    if recorded.exists():
        with np.load(recorded, allow_pickle=False) as z:
            instr, obs = z["instruction_tokens"], z["obs_tokens"]
        for i in range(min(cycles, len(obs))):
            yield instr[i].copy(), obs[i].copy()
        return
    rng = np.random.default_rng(seed)
    instr = rng.integers(0, md.obs.instr_classes, md.obs.instr_length)
    obs = rng.integers(0, md.obs.bins, md.obs.length)
    for _ in range(cycles):
        idx = rng.integers(0, md.obs.length, 2)
        obs[idx] = np.clip(obs[idx] + rng.integers(-1, 2, 2), 0, md.obs.bins - 1)
        yield instr.copy(), obs.copy()


def prefix_stream(md, cycles: int, seed: int, stream=None):
    """token_stream as model prefixes (rtinfer.model.sequence layout), one per cycle."""
    for instr, obs in token_stream(md, cycles, seed, stream):
        yield build_prefix(md.vocab, instr, obs)


COUNTS = ("verifies", "accepted", "target_passes", "plain_steps", "draft_passes", "passes", "rows")


def run(
    model_dir,
    cycles: int = 50,
    backend: str = "onnx",
    seed: int = 0,
    run_length: int = 10,
    pace_ms: float = 0.0,
    stream=None,
    draft_model=None,
    plan_drafter=None,
    **opts,
) -> dict:
    """Returns plain/spec tokens per second (decode phase, prefill excluded), the speedup
    of the best drafter, its mean accepted drafts per verify, `identical` (all drafters
    reproduced plain greedy), and per-drafter figures under `drafters` (see `measure`).
    draft_model: a draft model directory, measured as drafter "model" (same backend, opts).
    plan_drafter: a plan drafter's weights (rtinfer.inference.plan_drafter), measured as
    drafter "plan"."""
    be = get_backend(backend).load(model_dir, **opts)
    md, v = be.model, be.model.vocab
    h, d = md.tokenizer.horizon, md.tokenizer.dim
    drafters: dict = {
        "self": EarlyExitDrafter(min(be.depths), v.action_start, v.action_stop),
        "chunk": ChunkReuseDrafter(h, d),
    }
    if plan_drafter is not None:
        drafters["plan"] = PlanDrafter(ChunkReuseDrafter(h, d), PlanMLP.load(plan_drafter), v)
    if draft_model is not None:
        drafters["model"] = ModelDrafter(get_backend(backend).load(draft_model, **opts))
        drafters["model"].check_target(md)
    prefixes = list(prefix_stream(md, cycles, seed, stream))
    m = measure(be, drafters, prefixes, run_length, pace_ms)
    per = {
        name: {
            k: m[name][k]
            for k in (
                "tokens_per_s",
                "speedup",
                "cpu_speedup",
                "mean_accepted_per_verify",
                "tokens_per_target_pass",
                "acceptance",
                "identical",
            )
        }
        for name in drafters
    }
    best = max(per, key=lambda k: per[k]["tokens_per_s"])
    return {
        "floors": machine_floors(
            be,
            opts.get("precision", "fp32"),
            m["plain"]["decode_ns"].sum() / len(prefixes) / (md.chunk_tokens - 1) / 1e6,
        )
        if backend == "onnx" and opts.get("precision", "fp32") in ("fp32", "int8", "int4", "w8a8")
        else None,
        "backend": backend,
        "cycles": len(prefixes),
        "chunk_tokens": md.chunk_tokens,
        "best_drafter": best,
        "stream": str(stream)
        if stream
        else "recorded"
        if (md.path / "stream.npz").exists()
        else "synthetic",
        "run_length": run_length,
        "pace_ms": pace_ms,
        "plain_tokens_per_s": m["plain"]["tokens_per_s"],
        "spec_tokens_per_s": per[best]["tokens_per_s"],
        "speedup": per[best]["speedup"],
        "mean_accepted_per_verify": per[best]["mean_accepted_per_verify"],
        "identical": all(p["identical"] for p in per.values()),
        "drafters": per,
    }


def machine_floors(be, precision: str, in_chunk_step_ms: float, steps: int = 100) -> dict:
    """The step (k=1) and verify (k_verify) p50 against this machine's floors: copy bandwidth
    and the precision's matmul GFLOP/s, measured now (rtinfer.bench.scale_floors)."""
    md, k = be.model, Decoder(be).k_verify
    bandwidth, gflops = copy_bandwidth_gbs(), matmul_gflops((precision,))[precision]
    times = stage_times(be, {"step": 1, "verify": k}, steps)
    return {
        "copy_bandwidth_gbs": bandwidth,
        "matmul_gflops": gflops,
        "weight_bytes": precision_bytes(md.path, precision),
        "in_chunk_step_ms": in_chunk_step_ms,
        "steps": steps,
        "stages": floors(
            md.config,
            precision_bytes(md.path, precision),
            bandwidth,
            gflops,
            {s: t[0] for s, t in times.items()},
            {"step": 1, "verify": k},
            {s: t[2] for s, t in times.items()},
        ),
        "verify_over_step": times["verify"][0] / times["step"][0],
    }


def measure(
    be,
    drafters: dict,
    prefixes: list,
    run_length: int = 10,
    pace_ms: float = 0.0,
    decoder_opts: dict | None = None,
) -> dict:
    """Plain greedy and each drafter (name -> Drafter) decode every prefix on backend `be`.

    The variants take turns in runs of `run_length` consecutive cycles, their order
    rotating from run to run: within a run a variant's decode follows its own previous
    cycle, as in a node that decodes with one variant, so its graphs are as warm as they
    are there (run_length 1: every decode follows another variant's and finds its own
    weights partly evicted). A drafter that reuses chunks (ChunkReuseDrafter, or one with
    such a `reuse`) drafts from its own previous chunk, one period on; one with `start`
    (a separate draft model) is prefilled with the prefix inside the timed decode.
    pace_ms > 0 idles that long before each cycle, as a node waits between observations;
    on a shared host the caches go cold meanwhile, which costs the few verify passes of a
    speculative chunk relatively more than the many steps of a plain one.
    Returns per variant ("plain" and each drafter's name): tokens_per_s (decode phase),
    cpu_tokens_per_s (the same over the calling thread's CPU time: ONNX Runtime at one
    thread computes on it, so time the host gave other processes is left out), outs
    (cycles, n) bins, decode_ns, decode_cpu_ns and prefill_ns (cycles,) per cycle, the
    COUNTS summed over cycles (target_passes with each prefill; plain_steps: 1-token full-depth
    steps; draft_passes: the decoder's; passes and rows: the drafter's own counters), and for
    drafters speedup, cpu_speedup, identical, mean_accepted_per_verify, tokens_per_target_pass,
    acceptance.
    decoder_opts: drafter name -> its Decoder's options (k_verify, fit_verify; default none)."""
    if run_length < 1:
        raise ValueError(f"run_length must be >= 1, got {run_length}")
    if not prefixes:
        raise ValueError("the observation stream has no cycles")
    md, opts = be.model, decoder_opts or {}
    decs = {name: Decoder(be, **opts.get(name, {})) for name in ["plain", *drafters]}
    n, period, cycles = md.chunk_tokens, md.tokenizer.period_ns, len(prefixes)
    names = ["plain", *drafters]
    res = {
        name: {
            "outs": np.zeros((cycles, n), np.int64),
            "decode_ns": np.zeros(cycles),
            "decode_cpu_ns": np.zeros(cycles),
            "prefill_ns": np.zeros(cycles),
            "cycles": cycles,
        }
        | dict.fromkeys(COUNTS, 0)
        for name in names
    }
    for r, first in enumerate(range(0, cycles, run_length)):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            d, out, dec = drafters.get(name), res[name], decs[name]
            reuse = getattr(d, "reuse", d)
            for i in range(first, min(first + run_length, cycles)):
                if pace_ms > 0:
                    time.sleep(pace_ms / 1e3)
                be.reset()
                t0 = time.perf_counter_ns()
                logits = be.prefill(prefixes[i], 0)
                t1 = time.perf_counter_ns()
                if isinstance(reuse, ChunkReuseDrafter):
                    if i == 0:
                        reuse.clear()
                    else:
                        reuse.set_previous(out["outs"][i - 1], 0, period, period)
                passes, rows = getattr(d, "passes", 0), getattr(d, "rows", 0)
                c1 = time.thread_time_ns()
                if hasattr(d, "start"):
                    d.start(prefixes[i])
                out["outs"][i] = dec.decode(logits, len(prefixes[i]), n, drafter=d)
                t2, c2 = time.perf_counter_ns(), time.thread_time_ns()
                out["prefill_ns"][i], out["decode_ns"][i] = t1 - t0, t2 - t1
                out["decode_cpu_ns"][i] = c2 - c1
                st = dec.stats
                out["verifies"] += st.verifies
                out["accepted"] += st.accepted
                out["target_passes"] += st.target_passes + 1
                out["plain_steps"] += st.target_passes - st.verifies
                out["draft_passes"] += st.draft_passes
                out["passes"] += getattr(d, "passes", 0) - passes
                out["rows"] += getattr(d, "rows", 0) - rows
    tokens = n * cycles
    for name in names:
        out = res[name]
        out["tokens_per_s"] = tokens / (out["decode_ns"].sum() / 1e9)
        out["cpu_tokens_per_s"] = tokens / max(out["decode_cpu_ns"].sum() / 1e9, 1e-9)
        if name == "plain":
            continue
        out.update(
            speedup=out["tokens_per_s"] / res["plain"]["tokens_per_s"],
            cpu_speedup=out["cpu_tokens_per_s"] / res["plain"]["cpu_tokens_per_s"],
            identical=bool((out["outs"] == res["plain"]["outs"]).all()),
            mean_accepted_per_verify=out["accepted"] / max(out["verifies"], 1),
            tokens_per_target_pass=tokens / max(out["target_passes"], 1),
            acceptance=drafters[name].acceptance,
        )
    return res


def precision_run(
    model_dir,
    precisions=("fp32", "int8", "int4"),
    cycles: int = 50,
    rounds: int = 5,
    backend: str = "onnx",
    seed: int = 0,
    stream=None,
    **opts,
) -> dict:
    """Plain greedy decode of the same cycles with each precision's graphs, in one run: per
    round every precision decodes all cycles (the order rotating from round to round).
    Per precision: the decode step in us (decode phase / steps; the prefill is not timed)
    as the median over rounds, its ratio to the first precision's (per round, then the
    median, min and max), and its greedy token agreement with the first precision."""
    bes = {p: get_backend(backend).load(model_dir, precision=p, **opts) for p in precisions}
    md = bes[precisions[0]].model
    prefixes = list(prefix_stream(md, cycles, seed, stream))
    if not prefixes:
        raise ValueError(f"{stream or md.path}: the observation stream has no cycles")
    n = md.chunk_tokens
    decs = {p: Decoder(be) for p, be in bes.items()}
    outs = {p: np.zeros((len(prefixes), n), np.int64) for p in precisions}
    step_ns: dict[str, list[float]] = {p: [] for p in precisions}
    for r in range(rounds):
        for p in precisions[r % len(precisions) :] + precisions[: r % len(precisions)]:
            be, spent = bes[p], 0
            for i, prefix in enumerate(prefixes):
                be.reset()
                logits = be.prefill(prefix, 0)
                t0 = time.perf_counter_ns()
                outs[p][i] = decs[p].decode(logits, len(prefix), n)
                spent += time.perf_counter_ns() - t0
            step_ns[p].append(spent / (len(prefixes) * (n - 1)))
    base = np.array(step_ns[precisions[0]])
    per = {}
    for p in precisions:
        ratio = np.array(step_ns[p]) / base
        per[p] = {
            "step_us": float(np.median(step_ns[p]) / 1e3),
            "ratio": float(np.median(ratio)),
            "ratio_min": float(ratio.min()),
            "ratio_max": float(ratio.max()),
            "token_agreement": float((outs[p] == outs[precisions[0]]).mean()),
        }
    return {
        "backend": backend,
        "baseline": precisions[0],
        "cycles": len(prefixes),
        "rounds": rounds,
        "steps_per_round": len(prefixes) * (n - 1),
        "stream": str(stream)
        if stream
        else "recorded"
        if (md.path / "stream.npz").exists()
        else "synthetic",
        "precisions": per,
    }


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench decode`: speculative against plain decoding, tokens per second."""
    p = parser("decode", main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model directory")
    p.add_argument("--cycles", type=int, default=100, help="chunks per variant")
    p.add_argument("--backend", default="onnx")
    p.add_argument(
        "--run-length",
        type=int,
        default=10,
        help="consecutive cycles per variant before the next takes its turn",
    )
    p.add_argument(
        "--stream", default=None, help="observation stream .npz (default: the model's stream.npz)"
    )
    p.add_argument(
        "--pace-ms",
        type=float,
        default=0.0,
        help="idle this long before each cycle, as a node between observations",
    )
    p.add_argument(
        "--precision",
        nargs="+",
        default=None,
        metavar="P",
        help="graph set: fp32, fp16, int8 or int4 (default fp32); several: compare "
        "their plain decode steps against the first, in the same run",
    )
    p.add_argument(
        "--draft-model",
        default=None,
        metavar="DIR",
        help='also measure this draft model directory as drafter "model"',
    )
    p.add_argument(
        "--plan-drafter",
        default="auto",
        metavar="FILE",
        help='also measure this plan drafter\'s weights as drafter "plan" (auto: '
        "the one distilled from the shipped policy, when --model is it; none)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="with several precisions: rounds over the cycles per precision",
    )
    a = p.parse_args(argv)
    if a.precision and len(a.precision) > 1:
        return emit(
            "decode",
            precision_run(
                a.model,
                tuple(a.precision),
                cycles=a.cycles,
                rounds=a.rounds,
                backend=a.backend,
                stream=a.stream,
            ),
            a.json,
        )
    opts = {"precision": a.precision[0]} if a.precision else {}
    plan = a.plan_drafter
    if plan == "auto":
        shipped = Path(a.model).resolve() == Path(DEFAULT_MODEL).resolve()
        shipped = shipped and SHIPPED_PLAN_DRAFTER.exists()
        plan = SHIPPED_PLAN_DRAFTER if shipped else None
    return emit(
        "decode",
        run(
            a.model,
            cycles=a.cycles,
            backend=a.backend,
            run_length=a.run_length,
            pace_ms=a.pace_ms,
            stream=a.stream,
            draft_model=a.draft_model,
            plan_drafter=None if plan == "none" else plan,
            **opts,
        ),
        a.json,
    )


if __name__ == "__main__":
    sys.exit(main())
