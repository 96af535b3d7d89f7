"""`rtinfer bench dynamic` rows for a sparse-MoE policy and its equal-total dense baseline.

`moe_rows` times three graph sets on the same recorded stream, plain greedy, ONNX Runtime,
one thread, all cycles of a variant in one go, the variants' order rotating from run to
run (as dynamic.py times its levels): the dense policy the MoE was upcycled from (equal
active parameters), the MoE (models.moe, top-1 of E experts), and a dense policy whose FFNs
are E times wider (equal total parameters): a model directory given as `wide_dir`, or else
grown from the dense checkpoint function-preservingly (models.moe.widen_ffn, untrained:
its timing is the point; its output equals dense's to rounding, see token_agreement).
Rows in dynamic.py's format: variant, params, active_flops_per_token (relative to dense's
1-token step), step_p50_us, chunk_p50_ms, identical (chunk-reuse speculative greedy against
the variant's own plain greedy), success (the card's lockstep success at full depth), plus
step_ratio (against dense in the same run, median over runs), step_ratio_wide (against the
equal-total dense), dense_step_p50_us (dense's in the same run) and token_agreement (greedy
tokens equal to dense's).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from rtinfer.bench.decode import measure, prefix_stream
from rtinfer.bench.dynamic_figures import lockstep_success, params, pass_flops
from rtinfer.inference.backends import get_backend
from rtinfer.inference.drafters import ChunkReuseDrafter


def grown_wide(dense_dir, out_dir, factor: int) -> Path:
    """out_dir: the dense model directory's policy with FFNs `factor` times wider (same
    function), fp32 graphs on the dense directory's plan, no card success. Seconds."""
    import json

    from models import checkpoint
    from models.moe import package_dir, widen_ffn

    ck = checkpoint.load(Path(dense_dir) / "policy")
    package_dir(
        widen_ffn(ck.model, factor), ck.vocab, {"grown_from": str(dense_dir)}, dense_dir, out_dir
    )
    card = json.loads((Path(out_dir) / "card.json").read_text())
    card["success_from"] = "not measured: grown from dense, untrained (see token_agreement)"
    (Path(out_dir) / "card.json").write_text(json.dumps(card, indent=1))
    return Path(out_dir)


def _flops(card: dict, cfg: dict) -> float:
    """A 1-token full-depth step's FLOPs relative to dense's: routers (2 C E per layer) for
    an MoE, E - 1 more FFN widths (16 C^2 per layer each) for a wide dense."""
    C, L, ffn = cfg["n_embd"], cfg["n_layer"], card.get("ffn", {"kind": "dense"})
    dense = pass_flops(cfg, L, 1)
    extra = {
        "moe": lambda: L * 2 * C * ffn["n_expert"],
        "wide": lambda: L * 16 * C * C * (ffn["factor"] - 1),
    }.get(ffn["kind"], lambda: 0)
    return (dense + extra()) / dense


def moe_rows(
    moe_dir,
    dense_dir,
    wide_dir=None,
    cycles: int = 300,
    runs: int = 5,
    stream=None,
    seed: int = 0,
    run_length: int = 10,
    workdir=None,
) -> list[dict]:
    """The rows (module docstring) for moe_dir and its equal-total dense baseline; dense's
    own row is dynamic.py's. Blocks for about runs x 3 x cycles x a chunk's time (~1 min at
    300 cycles and 5 runs on the shipped size), plus ~10 s to grow the wide baseline."""
    import json

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        moe_card = json.loads((Path(moe_dir) / "card.json").read_text())
        if wide_dir is None:
            wide_dir = grown_wide(dense_dir, Path(tmp) / "wide", moe_card["ffn"]["n_expert"])
        dirs = {"dense": dense_dir, f"moe:E{moe_card['ffn']['n_expert']}": moe_dir}
        wide_card = json.loads((Path(wide_dir) / "card.json").read_text())
        dirs[f"dense-wide:x{wide_card['ffn']['factor']}"] = wide_dir
        bes = {n: get_backend("onnx").load(d, threads=1) for n, d in dirs.items()}
        prefixes = list(prefix_stream(bes["dense"].model, cycles, seed, stream))
        names, load = list(bes), [os.getloadavg()[0]]
        per: dict = {n: [] for n in names}
        for r in range(runs):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                per[n].append(measure(bes[n], {}, prefixes, len(prefixes))["plain"])
        load.append(os.getloadavg()[0])
        md = bes["dense"].model
        H, D = md.tokenizer.horizon, md.tokenizer.dim
        ident = {
            n: measure(bes[n], {"chunk": ChunkReuseDrafter(H, D)}, prefixes, run_length)["chunk"][
                "identical"
            ]
            for n in names[1:]
        }
        return [_row(n, bes[n].model, per, names, ident[n], load) for n in names[1:]]


def _step_us(runs: list, n: int) -> float:
    return float(np.median(np.concatenate([p["decode_ns"] for p in runs])) / (n - 1) / 1e3)


def _row(name: str, md, per: dict, names: list, identical: bool, load: list) -> dict:
    cfg, n = md.config, md.chunk_tokens
    mine = per[name]
    decode = np.concatenate([p["decode_ns"] for p in mine])
    chunk = decode + np.concatenate([p["prefill_ns"] for p in mine])

    def ratio(other):
        return float(
            np.median(
                [
                    np.median(a["decode_ns"]) / np.median(b["decode_ns"])
                    for a, b in zip(mine, per[other])
                ]
            )
        )

    dense_out = per["dense"][0]["outs"]
    card = md.card
    success = lockstep_success(card, cfg["n_layer"])
    return {
        "variant": name,
        "params": card.get("params", params(cfg)),
        "active_params": card.get("active_params"),
        "active_flops_per_token": _flops(card, cfg),
        "step_p50_us": _step_us(mine, n),
        "chunk_p50_ms": float(np.median(chunk) / 1e6),
        "step_ratio": ratio("dense"),
        "step_ratio_wide": ratio(names[-1]),
        "dense_step_p50_us": _step_us(per["dense"], n),
        "token_agreement": float((mine[0]["outs"] == dense_out).mean()),
        "identical": identical,
        "success": success,
        "success_from": "card.json" if success else card.get("success_from", "not measured"),
        "load_1min": load,
    }
