"""Time to first token with and without the instruction-prefix KV cache, same run.

Cached: the instruction prefix is prefilled once; each cycle prefills [observation][SEP].
Uncached: each cycle prefills the whole prefix from position 0. Cycles alternate between
the two so drift on a noisy host hits both alike. TTFT = prefill + first-token pick.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.inference.backends import get_backend
from rtinfer.model.sequence import instruction_prefix, observation_segment
from rtinfer.realtime.hist import LatencyHistogram


def run(model_dir, cycles: int = 200, backend: str = "onnx", seed: int = 0, **opts) -> dict:
    """Returns {"cached": {p50_us, p99_us}, "uncached": {...}, "speedup_p50"}."""
    be = get_backend(backend).load(model_dir, **opts)
    md, v = be.model, be.model.vocab
    rng = np.random.default_rng(seed)
    instr = rng.integers(0, md.obs.instr_classes, md.obs.instr_length)
    head = instruction_prefix(v, instr)
    hist = {"cached": LatencyHistogram(), "uncached": LatencyHistogram()}
    a0, a1 = v.action_start, v.action_stop
    for i in range(cycles + 10):
        seg = observation_segment(v, rng.integers(0, md.obs.bins, md.obs.length))
        full = np.concatenate([head, seg])
        for mode in ("cached", "uncached") if i % 2 else ("uncached", "cached"):
            be.reset()
            if mode == "cached":
                be.prefill(head, 0)  # done once per instruction in the node; not timed
            t0 = time.perf_counter_ns()
            if mode == "cached":
                logits = be.prefill(seg, len(head))
            else:
                logits = be.prefill(full, 0)
            int(logits[a0:a1].argmax())
            if i >= 10:  # warm-up cycles are not recorded
                hist[mode].record(time.perf_counter_ns() - t0)
    out = {m: {k: h.percentiles_us()[k] for k in ("p50", "p99")} for m, h in hist.items()}
    out = {m: {"p50_us": p["p50"], "p99_us": p["p99"]} for m, p in out.items()}
    out["speedup_p50"] = out["uncached"]["p50_us"] / max(out["cached"]["p50_us"], 1e-9)
    out.update(
        backend=backend,
        cycles=cycles,
        prefix_tokens=len(head) + md.obs.length + 1,
        cached_tokens=md.obs.length + 1,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench ttft`: time to first token with and without the prefix KV cache."""
    p = parser("ttft", main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model directory")
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--backend", default="onnx")
    a = p.parse_args(argv)
    return emit("ttft", run(a.model, cycles=a.cycles, backend=a.backend), a.json)


if __name__ == "__main__":
    sys.exit(main())
