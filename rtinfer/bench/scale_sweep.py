"""Where the cost of a chunk grows: chunk length H, action dims D, observation length L and
instruction length C, one at a time around the shipped layout (H=4, D=4, L=27, C=3).

One random-weight rung of the ladder (rtinfer.bench.scale_models), exported once with a longer
context (max_ctx 144) and a longer chunk buffer (horizon 16), and an observation-prefill graph
of every swept length, so each prefill is one pass as in the node. A point is a chunk as the
node computes it (ONNX Runtime, `threads` threads): with the instruction cached, the
observation segment's prefill (L + 1 tokens) and H x D decoded tokens (plain greedy);
"uncached" prefills the whole prefix (1 + C + L + 1 tokens) from position 0 every cycle. A
token policy sees H and D only through H x D. Points alternate their order run by run.
"""

from __future__ import annotations

import numpy as np

from rtinfer.bench.scale_models import model_dir, params_of
from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import instruction_prefix, observation_segment
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.wire import now_ns

BASE = {"H": 4, "D": 4, "L": 27, "C": 3}
VALUES = {"H": (1, 2, 4, 8, 16), "D": (2, 4, 8, 16), "L": (7, 13, 27, 54, 108), "C": (3, 15, 63)}
LABELS = {
    "H": "chunk length H (waypoints; D = 4)",
    "D": "action dims D (H = 4)",
    "L": "observation tokens L",
    "C": "instruction tokens C",
}
MAX_CTX, HORIZON = 144, 16


def points() -> list[dict]:
    """Every (variable, value, prefix mode) point; C is swept cached and uncached."""
    out = []
    for var, values in VALUES.items():
        for value in values:
            for prefix in ("cached", "uncached") if var == "C" else ("cached",):
                out.append({"var": var, "value": value, "prefix": prefix, **{**BASE, var: value}})
    return out


def prefill_lengths() -> list[int]:
    """Prefill graph lengths: the shipped 28 first, every L + 1, every uncached prefix."""
    ks = (
        [BASE["L"] + 1]
        + [p["L"] + 1 for p in points()]
        + [1 + p["C"] + p["L"] + 1 for p in points() if p["prefix"] == "uncached"]
    )
    return list(dict.fromkeys(ks))


def sweep(
    rung: str = "30M",
    precision: str = "int4",
    *,
    runs: int = 20,
    threads: int = 1,
    seed: int = 0,
    log=print,
) -> dict:
    path = model_dir(
        rung,
        prefills=prefill_lengths(),
        max_ctx=MAX_CTX,
        horizon=HORIZON,
        precisions=() if precision == "fp32" else (precision,),
        log=log,
    )
    md = ModelDir.load(path)
    be = get_backend("onnx").load(md, threads=threads, precision=precision)
    dec, v, rng = Decoder(be), md.vocab, np.random.default_rng(seed)
    pts = points()
    hists = [LatencyHistogram() for _ in pts]
    log(f"scale: sweep on {rung} {precision}, {len(pts)} points x {runs} runs")
    for r in range(runs + 1):  # run 0 warms every graph up, not recorded
        order = range(len(pts)) if r % 2 else reversed(range(len(pts)))
        for i in order:
            p = pts[i]
            instr = rng.integers(0, v.n_instr, p["C"])
            head = instruction_prefix(v, instr)
            seg = observation_segment(v, rng.integers(0, v.n_obs_bins, p["L"]))
            if p["prefix"] == "cached":
                be.prefill(head, 0)  # once per instruction in the node: not timed
            t0 = now_ns()
            if p["prefix"] == "cached":
                logits = be.prefill(seg, len(head))
            else:
                logits = be.prefill(np.concatenate([head, seg]), 0)
            dec.decode(logits, len(head) + len(seg), p["H"] * p["D"])
            if r:
                hists[i].record(now_ns() - t0)
    panels: dict[str, list] = {}
    for p, h in zip(pts, hists):
        q = h.percentiles_us()
        panels.setdefault(p["var"], []).append(
            {
                **p,
                "tokens": p["H"] * p["D"],
                "chunk_p50_ms": q["p50"] / 1e3,
                "chunk_p99_ms": q["p99"] / 1e3,
            }
        )
    return {
        "rung": rung,
        "params": params_of(path),
        "precision": precision,
        "runs": runs,
        "threads": threads,
        "max_ctx": MAX_CTX,
        "base": BASE,
        "labels": LABELS,
        "points": panels,
        "slopes_ms": slopes(panels),
    }


def slopes(panels: dict) -> dict:
    """Least-squares ms per unit of each variable (per decoded token for H and D, per
    observation token for L, per instruction token cached and uncached for C)."""
    out = {}
    for var, pts in panels.items():
        for mode in sorted({p["prefix"] for p in pts}):
            sel = [p for p in pts if p["prefix"] == mode]
            x = [p["tokens"] if var in "HD" else p["value"] for p in sel]
            key = f"{var}_per_token" + ("" if var != "C" else f"_{mode}")
            out[key] = float(np.polyfit(x, [p["chunk_p50_ms"] for p in sel], 1)[0])
    return out
