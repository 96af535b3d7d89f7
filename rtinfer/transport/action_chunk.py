"""One `action_chunk` message per waypoint: its body, and the stamps it carries over from the
observation it answers. Every publisher of action chunks (the inference node, the expert
node, the benchmarks) builds its messages here, so all of them read the same on the wire.

Stamp rule (docs/wire.md): a chunk carries every stamp of its observation except the
per-hop ones, `publish` and `recv`, which each hop takes anew; the policy adds `obs_recv`
(when it received the observation) and `first_token`, and the publisher adds `publish`.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

HOP_STAMPS = frozenset({"publish", "recv"})  # taken anew on every hop, never carried over


def carried_stamps(obs_stamps: Mapping[str, int], obs_recv_ns: int) -> dict[str, int]:
    """The observation's stamps that its chunk carries, plus `obs_recv`. A new dict."""
    out = {k: v for k, v in obs_stamps.items() if k not in HOP_STAMPS}
    out["obs_recv"] = obs_recv_ns
    return out


def waypoint_body(cycle: int, index: int, count: int, tokens: np.ndarray, values: np.ndarray,
                  tokenizer_hash: str, period_ns: int) -> dict:
    """The `action_chunk` body of waypoint `index` of `count` in chunk `cycle` (the seq of
    the observation it answers): D int32 tokens, their D decoded float32 values, the
    tokenizer's hash and the waypoint period (ns)."""
    return {"cycle": cycle, "index": index, "count": count, "tokens": tokens, "values": values,
            "tokenizer": tokenizer_hash, "period_ns": period_ns}
