"""Which observation tokens change from cycle to cycle, and how much of the prefill a KV cache
could therefore skip.

    python -m rtinfer.bench.scale_prefix [--stream FILE.npz ...] [--json]

The node caches the instruction prefix and prefills `[observation][SEP]` every cycle. In a
causal model a token's KV depends on every token before it, so a cache can keep an
observation token's KV only while it and all tokens before it are unchanged. Per stream
(default: the shipped policy's stream.npz; episodes as examples/conveyor_sorting/collect.py
writes them, with `episode`), over consecutive cycles of one episode:
- `change_rate`: per observation token, the fraction of cycles it changed;
- `changed_per_cycle`: mean observation tokens changed;
- `leading_unchanged`: mean unchanged tokens before the first change (what a cache of the
  previous cycle's KV could skip with the layout as it is);
- `static_first_prefill`: mean tokens left to prefill (SEP included) with the tokens that
  changed in under `static_below` of cycles placed first (a layout a retrained policy could
  use: its cache would then hold them), and the same as a fraction of today's prefill.
Counts, not times: they do not depend on the machine. What a k-token prefill costs at 100 M
is `rtinfer bench scale`'s stages (docs/benchmarks/compute.md).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from rtinfer.model.zoo import zoo_model


def changes(stream, static_below: float = 0.02) -> dict:
    """The change counts of one stream (.npz with obs_tokens, instruction_tokens[, episode])."""
    with np.load(stream, allow_pickle=False) as z:
        obs, instr = z["obs_tokens"], z["instruction_tokens"]
        episode = z["episode"] if "episode" in z.files else np.zeros(len(obs), np.int64)
    keep = (episode[1:] == episode[:-1]) & (instr[1:] == instr[:-1]).all(1)
    changed = (obs[1:] != obs[:-1])[keep]
    if not len(changed):
        raise ValueError(f"{stream}: no two consecutive cycles of one episode")
    rate = changed.mean(0)
    static = rate < static_below
    order = np.argsort(~static, kind="stable")  # the static tokens first, each kept in order
    n = obs.shape[1]
    left = n - _leading_unchanged(changed[:, order]) + 1  # SEP is always prefilled
    return {
        "stream": str(stream),
        "cycles": int(len(changed)),
        "tokens": int(n),
        "change_rate": [round(float(r), 3) for r in rate],
        "changed_per_cycle": float(changed.sum(1).mean()),
        "leading_unchanged": float(_leading_unchanged(changed).mean()),
        "static_below": static_below,
        "static_tokens": int(static.sum()),
        "static_first_prefill": float(left.mean()),
        "static_first_fraction": float(left.mean() / (n + 1)),
    }


def _leading_unchanged(changed: np.ndarray) -> np.ndarray:
    return np.cumprod(~changed, axis=1).sum(1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stream", nargs="+", default=[str(zoo_model() / "stream.npz")])
    p.add_argument("--static-below", type=float, default=0.02)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    out = [changes(s, a.static_below) for s in a.stream]
    if a.json:
        print(json.dumps(out, indent=2))
    for r in [] if a.json else out:
        print(
            f"{r['stream']}: {r['cycles']} cycle pairs, {r['changed_per_cycle']:.1f} of "
            f"{r['tokens']} tokens change a cycle, {r['leading_unchanged']:.2f} unchanged "
            f"before the first change; static first: {r['static_first_prefill']:.1f} of "
            f"{r['tokens'] + 1} prefill tokens ({r['static_first_fraction']:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
