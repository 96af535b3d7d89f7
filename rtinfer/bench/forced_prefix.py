"""What a committed prefix costs an action-token policy: its tokens fed in one pass of a step
graph (the decoder's forced prefix) against fed one decode step each, and the whole chunk's
decode with and without it.

    python -m rtinfer.bench.forced_prefix [--model models/zoo/conveyor-v1] [--rounds 50] [--json]

Per committed length (1 .. horizon - 1 waypoints): the median wall time of feeding the prefix
(one pass vs a step per token, the same KV positions after the same prefill) and of the
whole decode (plain greedy vs forced), with the passes each took. The same observation for
every round; ONNX Runtime on the CPU, one thread. Timings depend on the host: compare ratios
within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix

ROOT = Path(__file__).resolve().parents[2]


def _medians_us(fs: list, rounds: int) -> list[float]:
    """Each f's median wall time, us: the fs interleaved round by round, so a busy host's
    load falls on all of them alike."""
    times = [[] for _ in fs]
    for _ in range(rounds):
        for f, t in zip(fs, times):
            t0 = time.perf_counter_ns()
            f()
            t.append(time.perf_counter_ns() - t0)
    return [statistics.median(t) / 1e3 for t in times]


def _row(
    be,
    dec: Decoder,
    prefix: np.ndarray,
    logits: np.ndarray,
    forced: np.ndarray,
    n: int,
    rounds: int,
) -> dict:
    """One committed length's figures (us after the prefill, passes)."""
    ids, pos = forced + be.model.vocab.action_start, len(prefix)

    def one_pass():
        be.prefill(prefix, 0)
        dec.decode(logits, pos, n, forced=forced)

    def per_token():
        be.prefill(prefix, 0)
        for i in range(len(ids)):
            be.step(ids[i : i + 1], pos + i)

    def feed_one_pass():  # as the decoder feeds it: padded to its verify graph
        be.prefill(prefix, 0)
        be.step(dec._padded(ids, pos, be.n_layer), pos)

    def plain_decode():
        be.prefill(prefix, 0)
        dec.decode(logits, pos, n)

    one_pass()
    st = dec.stats
    pre, feed1, feedn, forced_us, plain_us = _medians_us(
        [lambda: be.prefill(prefix, 0), feed_one_pass, per_token, one_pass, plain_decode], rounds
    )
    return {
        "forced_tokens": len(forced),
        "feed_one_pass_us": round(feed1 - pre, 1),
        "feed_per_token_us": round(feedn - pre, 1),
        "decode_forced_us": round(forced_us - pre, 1),
        "decode_plain_us": round(plain_us - pre, 1),
        "forced_passes": st.forced_passes,
        "target_passes_forced": st.target_passes,
        "target_passes_plain": n - 1,
    }


def measure(model_dir, rounds: int = 50, threads: int = 1) -> dict:
    md = ModelDir.load(model_dir)
    be = get_backend("onnx").load(md, threads=threads)
    v, D, H = md.vocab, md.tokenizer.dim, md.tokenizer.horizon
    rng = np.random.default_rng(0)
    prefix = build_prefix(
        v,
        rng.integers(0, v.n_instr, md.obs.instr_length),
        rng.integers(0, v.n_obs_bins, md.obs.length),
    )
    dec, n = Decoder(be), H * D
    logits = be.prefill(prefix, 0).copy()
    plain = dec.decode(logits, len(prefix), n).copy()
    # a prefix the model itself would decode: a fair plan
    rows = [
        _row(be, dec, prefix, logits, plain[: w * D].copy(), n, rounds) | {"committed_waypoints": w}
        for w in range(1, H)
    ]
    return {
        "model": str(model_dir),
        "rounds": rounds,
        "threads": threads,
        "chunk_tokens": n,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models/zoo/conveyor-v1"))
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args(argv)
    out = measure(a.model, a.rounds)
    if a.json:
        print(json.dumps(out))
        return 0
    print(
        f"{out['model']}: {out['chunk_tokens']} tokens a chunk, median of {a.rounds}, us "
        f"after the prefill"
    )
    for r in out["rows"]:
        print(
            f"  {r['committed_waypoints']} committed ({r['forced_tokens']} tokens): fed in one "
            f"pass {r['feed_one_pass_us']}, a step each {r['feed_per_token_us']}; whole "
            f"decode forced {r['decode_forced_us']} ({r['target_passes_forced']} passes) vs "
            f"plain {r['decode_plain_us']} ({r['target_passes_plain']})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
