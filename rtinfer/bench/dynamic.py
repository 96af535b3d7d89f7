"""`rtinfer bench dynamic`: compute per token, dense greedy against each way of spending less.

One row per variant on the recorded stream (the model's stream.npz): dense (plain greedy),
then each drafter: chunk reuse, self-speculative (the shallowest exit), a separate draft
model (the shipped `<model>-draft` when there is one, and the target's first blocks as a
model of their own), the cascade (chunk reuse filtered at the shallowest exit, then full
depth; `cascade-k{W}`: a verify window W wide enough for the whole chunk, and up to two exit
passes), then the FFN-skip levels of models.ffn_skip (`ffn-skip:N`: lossy, so they carry
`step_ratio` against dense and `token_agreement` / `chunk_agreement` with dense's greedy
output instead of `identical` and `speedup`).
`--gated DIR` adds the budget levels a gated model directory declares (graphs.json "gated"),
measured on that directory's own backend (one session set per level, switched with
use_gate, as the runner does): `gated:dense` and `gated:<name>` rows (see `gated_rows`);
`--gated-only` measures just those.
Every variant runs on the same fp32 graphs (plus the cascade's exit-verify graph), ONNX
Runtime, one thread, in `runs` runs of rtinfer.bench.decode.measure (variants interleaved).
Per row:
- params: total parameters (a draft model's added to the target's);
- active_flops_per_token: matmul and attention FLOPs computed per output token in the decode
  phase (verify rows counted padded, as they run), relative to dense's 1-token step;
- step_p50_us: median over chunks of decode time / decoded tokens (dense: the 1-token step);
- chunk_p50_ms: median over chunks of prefill + decode;
- speedup (drafters): tokens/s over plain greedy's in the same run, median of the runs;
  cpu_speedup: the same over the decoding thread's CPU time (what the host's other load
  does not move);
- identical: the drafter's output equals plain greedy's on every cycle (null for dense);
- success: lockstep success from card.json at full depth over the instructions it lists;
  drafters are lossless, so where identical their success is dense's (`success_from`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.decode import measure, prefix_stream
from rtinfer.bench.dynamic_figures import lockstep_success, params, pass_flops
from rtinfer.bench.dynamic_models import truncated_draft, with_graphs
from rtinfer.bench.dynamic_moe import moe_rows
from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.inference.backends import get_backend
from rtinfer.inference.drafters import ChunkReuseDrafter, EarlyExitDrafter
from rtinfer.inference.model_drafter import CascadeDrafter, ModelDrafter


def _variants(be, draft_dirs: list[Path], k: int, wide: int) -> tuple[dict, dict, dict]:
    """name -> Drafter, name -> its Decoder's options, name -> a draft model's config."""
    md, v = be.model, be.model.vocab
    H, D, e = md.tokenizer.horizon, md.tokenizer.dim, min(be.depths)
    drafters = {
        "chunk": ChunkReuseDrafter(H, D),
        "self": EarlyExitDrafter(e, v.action_start, v.action_stop),
        "cascade": CascadeDrafter(ChunkReuseDrafter(H, D), e, v.action_start, v.action_stop, k),
        f"cascade-k{wide}": CascadeDrafter(
            ChunkReuseDrafter(H, D), e, v.action_start, v.action_stop, wide, rounds=2
        ),
    }
    opts = {name: {"k_verify": k} for name in ["plain", *drafters]}
    opts[f"cascade-k{wide}"] = {"k_verify": wide}
    cfgs = {}
    for path in draft_dirs:
        d = ModelDrafter(get_backend("onnx").load(path, threads=1))
        d.check_target(md)
        name = f"model:{path.name}"
        drafters[name], opts[name], cfgs[name] = d, {"k_verify": k}, d.backend.model.config
    return drafters, opts, cfgs


def _flops(m: dict, d, cfg: dict, dcfg: dict | None, k: int, n_prefix: int) -> float:
    """FLOPs of a variant's decode phase over all its cycles (m: one measure() row)."""
    L = cfg["n_layer"]
    total = pass_flops(cfg, L, 1) * m["plain_steps"] + pass_flops(cfg, L, k) * m["verifies"]
    if isinstance(d, EarlyExitDrafter):
        total += pass_flops(cfg, d.depth, 1) * m["draft_passes"]
    elif isinstance(d, CascadeDrafter):
        total += pass_flops(cfg, d.depth, 1) * m["rows"]
    elif isinstance(d, ModelDrafter):
        total += (
            pass_flops(dcfg, dcfg["n_layer"], 1) * m["passes"]
            + pass_flops(dcfg, dcfg["n_layer"], n_prefix) * m["cycles"]
        )
    return total


def run(
    model_dir=DEFAULT_MODEL,
    cycles: int = 300,
    runs: int = 5,
    run_length: int = 10,
    draft_models=None,
    stream=None,
    seed: int = 0,
    workdir=None,
    ffn_skip=(2, 4, 6),
    routed=(),
) -> dict:
    """The rows (see the module docstring). draft_models: model directories of draft
    policies (default: `<model>-draft` beside the model when it exists); the truncated
    draft (the target's shallowest exit as a model) is always added. ffn_skip: FFN-skip
    levels (models.ffn_skip: the FFNs of the N deepest layers removed), plain greedy each,
    after the drafters in every run, beside dense run the same way (all cycles in one go:
    their step_ratio is against that). routed: model directories of routed policies
    (models.gating export), measured the same way. workdir: where the derived model directories go
    (default: a temporary folder, removed after)."""
    src = Path(model_dir)
    md0 = get_backend("onnx").load(src, threads=1).model
    cfg, exit_d = md0.config, min(md0.config["exits"])
    k = max(g["k"] for g in md0.manifest["graphs"] if "verify" in g.get("roles", ()))
    wide = min(md0.chunk_tokens, md0.max_ctx - md0.prefix_len - 1)  # one verify per chunk
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        target = with_graphs(
            src, Path(tmp) / "target", [(exit_d, k), (exit_d, wide), (cfg["n_layer"], wide)]
        )
        dirs = [Path(p) for p in (draft_models or [])]
        shipped = src.parent / f"{src.name}-draft"
        if draft_models is None and shipped.is_dir():
            dirs.append(shipped)
        dirs.append(truncated_draft(src, Path(tmp) / f"truncated-d{exit_d}", exit_d, k))
        be = get_backend("onnx").load(target, threads=1)
        drafters, opts, dcfgs = _variants(be, dirs, k, wide)
        prefixes = list(prefix_stream(be.model, cycles, seed, stream))
        load = [os.getloadavg()[0]]
        levels = {f"routed:{Path(d).name}": get_backend("onnx").load(d, threads=1) for d in routed}
        ffn_skip = [s for s in ffn_skip if 0 < s <= cfg["n_layer"]]
        if ffn_skip:
            from models.ffn_skip import export_levels

            levels.update(
                {
                    f"ffn-skip:{n}": get_backend("onnx").load(p, threads=1)
                    for n, p in export_levels(src, Path(tmp) / "gating", ffn_skip, k).items()
                }
            )
        results, skips = [], []
        for _ in range(runs):
            results.append(measure(be, drafters, prefixes, run_length, decoder_opts=opts))
            # dense again, the way the levels run (all cycles in one go), as their baseline
            skips.append(
                {
                    n: measure(lb, {}, prefixes, len(prefixes))["plain"]
                    for n, lb in [("dense", be), *levels.items()]
                }
                if levels
                else {}
            )
        load.append(os.getloadavg()[0])
        # a routed model's speculative greedy against its own plain greedy (causal routes)
        ident = {
            n: measure(
                lb,
                {"chunk": ChunkReuseDrafter(md0.tokenizer.horizon, md0.tokenizer.dim)},
                prefixes,
                run_length,
            )["chunk"]["identical"]
            for n, lb in levels.items()
            if n.startswith("routed:")
        }
        rows = _rows(be.model, drafters, opts, dcfgs, results, len(prefixes[0]))
        rows += _level_rows(be.model, levels, results, skips, ident)
    return {
        "model": str(src),
        "backend": "onnx",
        "threads": 1,
        "cycles": len(prefixes),
        "runs": runs,
        "run_length": run_length,
        "chunk_tokens": be.model.chunk_tokens,
        "load_1min": load,
        "rows": rows,
    }


def _rows(md, drafters: dict, opts: dict, dcfgs: dict, results: list, n_prefix: int) -> list:
    cfg, n = md.config, md.chunk_tokens
    dense = pass_flops(cfg, cfg["n_layer"], 1)
    success = lockstep_success(md.card, cfg["n_layer"])
    rows = []
    for name in ["plain", *drafters]:
        d, per = drafters.get(name), [r[name] for r in results]
        decode = np.concatenate([p["decode_ns"] for p in per])
        chunk = decode + np.concatenate([p["prefill_ns"] for p in per])
        tokens = n * len(per[0]["decode_ns"])
        flops = _flops(per[0], d, cfg, dcfgs.get(name), opts[name]["k_verify"], n_prefix)
        row = {
            "variant": "dense" if d is None else name,
            "params": params(cfg) + (params(dcfgs[name]) if name in dcfgs else 0),
            "active_flops_per_token": flops / (tokens - len(per[0]["decode_ns"])) / dense,
            "step_p50_us": float(np.median(decode) / (n - 1) / 1e3),
            "chunk_p50_ms": float(np.median(chunk) / 1e6),
            "identical": None,
            "success": success,
            "success_from": "card.json",
        }
        if d is not None:
            ident = all(p["identical"] for p in per)
            sp, cpu = [p["speedup"] for p in per], [p["cpu_speedup"] for p in per]
            row.update(
                identical=ident,
                speedup=float(np.median(sp)),
                speedup_min=float(min(sp)),
                speedup_max=float(max(sp)),
                cpu_speedup=float(np.median(cpu)),
                cpu_speedup_min=float(min(cpu)),
                cpu_speedup_max=float(max(cpu)),
                tokens_per_target_pass=float(np.median([p["tokens_per_target_pass"] for p in per])),
                acceptance=float(d.acceptance),
                success=success if ident else None,
                success_from="dense (lossless: identical output)"
                if ident
                else "not measured: output differs from dense",
            )
        rows.append(row)
    return rows


def _level_rows(md, levels: dict, results: list, skips: list, ident: dict) -> list:
    """Rows of the lossy levels (FFN-skip, routed): step ratio against dense run the same
    way, agreement with dense's greedy output; a routed model's `identical` is its chunk
    drafter's output against its own plain greedy."""
    from models.config import PolicyConfig
    from models.ffn_skip import ffn_flops_fraction

    cfg, n, rows = md.config, md.chunk_tokens, []
    C, L, pc = cfg["n_embd"], cfg["n_layer"], PolicyConfig.from_dict(cfg)
    dense_out = results[0]["plain"]["outs"]
    for name, lb in levels.items():
        per = [s[name] for s in skips]
        decode = np.concatenate([p["decode_ns"] for p in per])
        chunk = decode + np.concatenate([p["prefill_ns"] for p in per])
        ratio = [
            np.median(p["decode_ns"]) / np.median(s["dense"]["decode_ns"])
            for p, s in zip(per, skips)
        ]
        row = {
            "variant": name,
            "step_p50_us": float(np.median(decode) / (n - 1) / 1e3),
            "chunk_p50_ms": float(np.median(chunk) / 1e6),
            "step_ratio": float(np.median(ratio)),
            "token_agreement": float((per[0]["outs"] == dense_out).mean()),
            "chunk_agreement": float((per[0]["outs"] == dense_out).all(1).mean()),
            "identical": ident.get(name),
            "success": None,
        }
        if name.startswith("ffn-skip:"):
            skip = int(name.split(":")[1])
            row.update(
                params=params(cfg) - skip * (8 * C * C + (7 if cfg["bias"] else 1) * C),
                active_flops_per_token=ffn_flops_fraction(pc, skip),
                success_from="not measured: static FFN skip, no router, untrained "
                "(lossy; see token_agreement)",
            )
        else:  # routers: one (C -> 1) linear per layer; FLOPs from the card's skipped fraction
            skipped = lb.model.card.get("ffn_skipped")
            row.update(
                params=params(cfg) + L * (C + 1),
                active_flops_per_token=None
                if skipped is None
                else 1 - (1 - ffn_flops_fraction(pc, L)) * skipped,
                ffn_skipped=skipped,
                success_from="not measured: lossy (see token_agreement)",
            )
        rows.append(row)
    return rows


def _step_times(be, prefix: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """ns of each 1-token full-depth step feeding `tokens` (vocab ids: a gated graph's routes
    depend on them) after `prefix` (prefilled first)."""
    be.reset()
    be.prefill(prefix, 0)
    out, one, pos = np.zeros(len(tokens)), np.zeros(1, np.int64), len(prefix)
    for j, t in enumerate(tokens):
        one[0] = t
        t0 = time.perf_counter_ns()
        be.step(one, pos + j)
        out[j] = time.perf_counter_ns() - t0
    return out


def gated_rows(
    model_dir, cycles: int = 300, runs: int = 5, run_length: int = 10, seed: int = 0, stream=None
) -> dict:
    """The budget levels of a gated model directory on the recorded stream, ONNX Runtime,
    one thread, one backend: in each of `runs` runs every level (dense, then each gated set,
    the order rotating) decodes the stream plain and with the chunk-reuse drafter
    (rtinfer.bench.decode.measure), then times each 1-token full-depth step of its own
    plain greedy chunks on 1 in 3 cycles. Per row: step_p50_us / step_p99_us (those steps,
    all runs), step_ratio (median over runs of the level's median step over dense's in
    the same run), step_runs and step_count, chunk_p50_ms, token/chunk agreement with
    dense's greedy output, identical (the drafter's output equals the level's own plain
    greedy on every cycle), ffn_active / active_flops_per_token (the declared fraction of
    FFNs run; FLOPs relative to dense's 1-token step) and success (the declaration's)."""
    be = get_backend("onnx").load(model_dir, threads=1)
    md, cfg = be.model, be.model.config
    prefixes = list(prefix_stream(md, cycles, seed, stream))
    names, n = [None, *be.gates], md.chunk_tokens
    H, D = md.tokenizer.horizon, md.tokenizer.dim
    drafters = {name: ChunkReuseDrafter(H, D) for name in names}
    res, steps = {name: [] for name in names}, {name: [] for name in names}
    load = [os.getloadavg()[0]]
    for r in range(runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            be.use_gate(name)
            m = measure(be, {"chunk": drafters[name]}, prefixes, run_length)
            res[name].append(m)
            steps[name].append(
                np.concatenate(
                    [
                        _step_times(
                            be, prefixes[i], m["plain"]["outs"][i, :-1] + md.vocab.action_start
                        )
                        for i in range(0, len(prefixes), 3)
                    ]
                )
            )
    load.append(os.getloadavg()[0])
    be.use_gate(None)
    L, C = cfg["n_layer"], cfg["n_embd"]
    dense_flops, ffn = pass_flops(cfg, L, 1), 16 * C * C * L
    dense_out = res[None][0]["plain"]["outs"]
    rows = []
    for name in names:
        gs = md.gated.get(name)
        st, per = np.concatenate(steps[name]), res[name]
        chunk = np.concatenate([p["plain"]["decode_ns"] + p["plain"]["prefill_ns"] for p in per])
        outs = per[0]["plain"]["outs"]
        active = 1.0 if gs is None else gs.ffn_active
        rows.append(
            {
                "variant": f"gated:{name or 'dense'}",
                "params": params(cfg) + (0 if gs is None else L * (C + 1)),  # + the routers
                "tau": None if gs is None else gs.tau,
                "ffn_active": active,
                "active_flops_per_token": (dense_flops - ffn * (1 - active)) / dense_flops,
                "step_p50_us": float(np.median(st) / 1e3),
                "step_p99_us": float(np.percentile(st, 99) / 1e3),
                "step_ratio": float(
                    np.median(
                        [np.median(a) / np.median(b) for a, b in zip(steps[name], steps[None])]
                    )
                ),
                "step_runs": runs,
                "step_count": int(st.size),
                "chunk_p50_ms": float(np.median(chunk) / 1e6),
                "token_agreement": float((outs == dense_out).mean()),
                "chunk_agreement": float((outs == dense_out).all(1).mean()),
                "identical": all(p["chunk"]["identical"] for p in per),
                "success": md.accuracy(L) if gs is None else gs.accuracy,
                "success_from": "card.json accuracy" if gs is None else "graphs.json gated",
            }
        )
    return {
        "model": str(model_dir),
        "backend": "onnx",
        "threads": 1,
        "cycles": len(prefixes),
        "runs": runs,
        "run_length": run_length,
        "chunk_tokens": n,
        "load_1min": load,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench dynamic`: dense against each drafter (compute, step time, speedup)."""
    p = parser("dynamic", main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model directory")
    p.add_argument("--cycles", type=int, default=300, help="cycles of the stream per run")
    p.add_argument("--runs", type=int, default=5, help="interleaved runs (medians over them)")
    p.add_argument(
        "--run-length",
        type=int,
        default=10,
        help="consecutive cycles per variant before the next takes its turn",
    )
    p.add_argument(
        "--draft-model",
        action="append",
        default=None,
        metavar="DIR",
        help="a draft model directory (repeatable; default: <model>-draft if there)",
    )
    p.add_argument("--stream", default=None, help="observation stream .npz")
    p.add_argument(
        "--ffn-skip",
        type=int,
        nargs="*",
        default=[2, 4, 6],
        metavar="N",
        help="FFN-skip levels: the FFNs of the N deepest layers removed (none: off)",
    )
    p.add_argument(
        "--routed",
        nargs="*",
        default=[],
        metavar="DIR",
        help="routed model directories (python -m models.gating export), as levels",
    )
    p.add_argument(
        "--gated",
        default=None,
        metavar="DIR",
        help='a gated model directory (graphs.json "gated"): its levels as rows',
    )
    p.add_argument("--gated-only", action="store_true", help="measure only --gated's levels")
    p.add_argument(
        "--moe",
        nargs="*",
        default=[],
        metavar="DIR",
        help="MoE model directories (models.moe): each beside dense and a dense "
        "policy of equal total parameters grown from --model",
    )
    p.add_argument("--quick", action="store_true", help="10 cycles, 2 runs (a smoke test)")
    a = p.parse_args(argv)
    cycles, runs = (10, 2) if a.quick else (a.cycles, a.runs)
    if a.gated_only and not a.gated:
        p.error("--gated-only needs --gated DIR")
    out = (
        None
        if a.gated_only
        else run(
            a.model,
            cycles,
            runs,
            a.run_length,
            a.draft_model,
            a.stream,
            ffn_skip=tuple(a.ffn_skip),
            routed=tuple(a.routed),
        )
    )
    if a.gated:
        g = gated_rows(a.gated, cycles, runs, a.run_length)
        out = (
            g
            if out is None
            else {
                **out,
                "rows": out["rows"] + g["rows"],
                "gated": {k: v for k, v in g.items() if k != "rows"},
            }
        )
    if a.moe:
        rows = [
            r
            for d in a.moe
            for r in moe_rows(
                d, a.model, cycles=cycles, runs=runs, stream=a.stream, run_length=a.run_length
            )
        ]
        out = {"rows": rows} if out is None else {**out, "rows": out["rows"] + rows}
    return emit("dynamic", out, a.json)


if __name__ == "__main__":
    sys.exit(main())
