"""Rows `spec_vs_theory` and `decode_vs_bandwidth_floor`: rtinfer against theory and physics.

spec_vs_theory: per drafter, greedy speculative decoding over the drifting observation
stream of rtinfer.bench.decode, recording every verify's (accepted a_v, drafted g_v). The
per-token acceptance rate is the geometric MLE alpha = sum(a) / (sum(a) + rejections)
(a rejection: a verify with a_v < g_v). Leviathan et al. (2023) predict
E[tokens per verify] = (1 - alpha^(g+1)) / (1 - alpha) for i.i.d. acceptance; the row
averages that over the verifies' own g_v and compares it with the measured mean(a_v + 1).
decode_vs_bandwidth_floor: rtinfer.bench.backend's k=1 full-depth decode step of a
bench-size (GPT-2-small-shaped, ~86M params) random model vs weight bytes / copy bandwidth.
"""

from __future__ import annotations

import numpy as np

from peers.row import unavailable_row


class _Recording:
    """Drafter proxy that logs (accepted, drafted) per verify."""

    def __init__(self, drafter):
        self._d, self.log = drafter, []

    def __getattr__(self, name):
        return getattr(self._d, name)

    def draft(self, ctx, k):
        return self._d.draft(ctx, k)

    def observe(self, accepted: int, drafted: int) -> None:
        self.log.append((accepted, drafted))
        self._d.observe(accepted, drafted)


def theory_tokens_per_verify(alpha: float, g) -> float:
    g = np.asarray(g, np.float64)
    if alpha >= 1.0:
        return float(np.mean(g + 1))
    return float(np.mean((1 - alpha ** (g + 1)) / (1 - alpha)))


def spec_rows(model_dir, cycles: int, seed: int = 0) -> list[dict]:
    from rtinfer.bench.decode import prefix_stream
    from rtinfer.inference.backends import get_backend
    from rtinfer.inference.decode import Decoder
    from rtinfer.inference.drafters import ChunkReuseDrafter, EarlyExitDrafter

    be = get_backend("onnx").load(model_dir, threads=1)
    md, v = be.model, be.model.vocab
    dec, n, period = Decoder(be), be.model.chunk_tokens, md.tokenizer.period_ns
    drafters = {
        "chunk": _Recording(ChunkReuseDrafter(md.tokenizer.horizon, md.tokenizer.dim)),
        "self": _Recording(EarlyExitDrafter(min(be.depths), v.action_start, v.action_stop)),
    }
    prev, identical = None, True
    for prefix in prefix_stream(md, cycles, seed):
        be.reset()
        ref = dec.decode(be.prefill(prefix, 0), len(prefix), n).copy()
        for name, d in drafters.items():
            be.reset()
            logits = be.prefill(prefix, 0)
            if name == "chunk":
                d._d.clear() if prev is None else d._d.set_previous(prev, 0, period, period)
            identical &= bool((dec.decode(logits, len(prefix), n, drafter=d) == ref).all())
        prev = ref
    out = []
    for name, d in drafters.items():
        log = np.asarray(d.log, np.int64).reshape(-1, 2)
        a, g = log[:, 0], log[:, 1]
        rejections = int((a < g).sum())
        alpha = float(a.sum() / max(a.sum() + rejections, 1))
        measured = float(np.mean(a + 1)) if len(a) else None
        theory = theory_tokens_per_verify(alpha, g) if len(a) else None
        out.append(
            {
                "name": "spec_vs_theory",
                "peer": "theory (Leviathan et al. 2023)",
                "peer_version": None,
                "peer_available": True,
                "unit": "tokens per verify",
                "variant": name,
                "alpha": round(alpha, 4),
                "mean_gamma": round(float(g.mean()), 2) if len(g) else None,
                "acceptance_rate": round(d.acceptance, 4),
                "measured_tokens_per_verify": None if measured is None else round(measured, 3),
                "theory_tokens_per_verify": None if theory is None else round(theory, 3),
                "measured_over_theory": round(measured / theory, 3) if theory else None,
                "verifies": int(len(a)),
                "cycles": cycles,
                "identical": identical,
            }
        )
    return out


def floor_rows(bench_model_dir, steps: int, threads: int = 1) -> list[dict]:
    from rtinfer.bench.backend import run

    r = run({"bench": bench_model_dir}, backends=("onnx",), steps=steps, threads=threads)
    size = r["sizes"]["bench"]
    be = size["backends"]["onnx"]
    if "skipped" in be:
        return [
            unavailable_row("decode_vs_bandwidth_floor", "memory-bandwidth floor", be["skipped"])
        ]
    d = be["decode"]
    return [
        {
            "name": "decode_vs_bandwidth_floor",
            "peer": "memory-bandwidth floor",
            "peer_version": None,
            "peer_available": True,
            "unit": "us per decode step",
            "rtinfer_p50": round(d["p50_us"], 1),
            "rtinfer_p99": round(d["p99_us"], 1),
            "floor_us": round(size["floor_us"], 1),
            "weight_bytes": size["weight_bytes"],
            "copy_bandwidth_gbs": round(r["copy_bandwidth_gbs"], 2),
            "decode_over_floor": round(be["decode_over_floor"], 2),
            "steps": steps,
            "threads": threads,
            "backend": "onnx (fp32, k=1, full depth)",
        }
    ]
