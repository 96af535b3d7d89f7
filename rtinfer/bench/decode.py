"""Speculative vs plain decoding throughput on one model, measured in the same run.

Cycles replay consecutive real observations when the model directory ships a
`stream.npz` (instruction_tokens (N, C), obs_tokens (N, L), one row per policy period, as
recorded from the cell), else a slowly drifting synthetic stream (each cycle moves a few
random observation tokens by one bin: out of distribution for a trained policy, so
acceptance rates there say little). Every drafter's output is compared token for token with
plain greedy (`identical`).
"""
from __future__ import annotations

import time

import numpy as np

from rtinfer.backends import get_backend
from rtinfer.decode import Decoder
from rtinfer.drafters import ChunkReuseDrafter, EarlyExitDrafter
from rtinfer.sequence import build_prefix


def token_stream(md, cycles: int, seed: int):
    """(instruction, observation) raw tokens per cycle: the model's recorded stream.npz if
    it ships one, else the synthetic drifting stream."""
    recorded = md.path / "stream.npz"
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


def prefix_stream(md, cycles: int, seed: int):
    """token_stream as model prefixes (rtinfer.sequence layout), one per cycle."""
    for instr, obs in token_stream(md, cycles, seed):
        yield build_prefix(md.vocab, instr, obs)


def run(model_dir, cycles: int = 50, backend: str = "onnx", seed: int = 0, **opts) -> dict:
    """Returns plain/spec tokens per second (decode phase, prefill excluded), the speedup
    of the best drafter, its mean accepted drafts per verify, `identical` (all drafters
    reproduced plain greedy), and per-drafter figures under `drafters`."""
    be = get_backend(backend).load(model_dir, **opts)
    md, v = be.model, be.model.vocab
    dec, n, period = Decoder(be), be.model.chunk_tokens, md.tokenizer.period_ns
    drafters = {"self": EarlyExitDrafter(min(be.depths), v.action_start, v.action_stop),
                "chunk": ChunkReuseDrafter(md.tokenizer.horizon, md.tokenizer.dim)}
    prefixes = list(prefix_stream(md, cycles, seed))
    names = ["plain", *drafters]
    t = dict.fromkeys(names, 0)
    stats = {name: {"verifies": 0, "accepted": 0, "target_passes": 0} for name in drafters}
    identical, prev = True, None
    outs = {name: np.zeros(n, np.int64) for name in names}
    for i, prefix in enumerate(prefixes):
        # the order rotates every cycle: whichever runs after another variant finds the
        # weights of the graphs it shares warm in cache, so no variant always goes first
        for name in names[i % len(names):] + names[:i % len(names)]:
            be.reset()
            logits = be.prefill(prefix, 0)
            d = drafters.get(name)
            if name == "chunk":
                if prev is None:
                    d.clear()
                else:
                    d.set_previous(prev, 0, period, period)
            t0 = time.perf_counter_ns()
            out = dec.decode(logits, len(prefix), n, drafter=d)
            t[name] += time.perf_counter_ns() - t0
            outs[name][:] = out
            if name != "plain":
                s = stats[name]
                s["verifies"] += dec.stats.verifies
                s["accepted"] += dec.stats.accepted
                s["target_passes"] += dec.stats.target_passes + 1
        ref = outs["plain"]
        identical &= all(bool((outs[name] == ref).all()) for name in drafters)
        prev = ref.copy()
    cycles = len(prefixes)
    tokens = n * cycles
    tps = {k: tokens / (ns / 1e9) for k, ns in t.items()}
    per = {name: {"tokens_per_s": tps[name], "speedup": tps[name] / tps["plain"],
                  "mean_accepted_per_verify": s["accepted"] / max(s["verifies"], 1),
                  "tokens_per_target_pass": tokens / max(s["target_passes"], 1),
                  "acceptance": drafters[name].acceptance}
           for name, s in stats.items()}
    best = max(per, key=lambda k: per[k]["tokens_per_s"])
    return {"backend": backend, "cycles": cycles, "chunk_tokens": n, "best_drafter": best,
            "stream": "recorded" if (md.path / "stream.npz").exists() else "synthetic",
            "plain_tokens_per_s": tps["plain"], "spec_tokens_per_s": tps[best],
            "speedup": per[best]["speedup"],
            "mean_accepted_per_verify": per[best]["mean_accepted_per_verify"],
            "identical": identical, "drafters": per}
