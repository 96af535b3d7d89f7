"""One `action_chunk` message per waypoint: its body, and the stamps it carries over from the
observation it answers. Every publisher of action chunks (the inference node, the expert
node, the benchmarks) builds its messages here, so all of them read the same on the wire.

Stamp rule (docs/wire.md): a chunk carries every stamp of its observation except the
per-hop ones, `publish` and `recv`, which each hop takes anew; the policy adds `obs_recv`
(when it received the observation) and `first_token`, and the publisher adds `publish`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

HOP_STAMPS = frozenset({"publish", "recv"})  # taken anew on every hop, never carried over


def carried_stamps(obs_stamps: Mapping[str, int], obs_recv_ns: int) -> dict[str, int]:
    """The observation's stamps that its chunk carries, plus `obs_recv`. A new dict."""
    out = {k: v for k, v in obs_stamps.items() if k not in HOP_STAMPS}
    out["obs_recv"] = obs_recv_ns
    return out


def waypoint_body(
    cycle: int,
    index: int,
    count: int,
    values: np.ndarray,
    *,
    spec: str,
    period_ns: int,
    start_ns: int,
    dest: str,
    tokens: np.ndarray | None = None,
    conditioned: dict | None = None,
    ask: dict | None = None,
) -> dict:
    """The `action_chunk` body (wire v2) of waypoint `index` of `count` in chunk `cycle` (the
    seq of the observation it answers), for robot `dest` (that observation's `src`): its D
    float32 values; for an action-token policy also its D int tokens (then `spec` is the
    tokenizer's hash and values are the tokens' bin centres), else `spec` is the action
    spec's hash. Waypoint i is due at capture + start_ns + i * period_ns. `conditioned`:
    the committed prefix the chunk was conditioned on (rtinfer.transport.committed), named
    in every waypoint; None for a chunk that was not. `ask`: what a node under overload asks
    of a robot that said it takes asks ({"executes": n} and/or {"obs_period_ns": ns},
    rtinfer.inference.horizon), written last; None: nothing asked (the bytes as before)."""
    body = {
        "cycle": cycle,
        "index": index,
        "count": count,
        "dest": dest,
        "values": values,
        "spec": spec,
        "period_ns": period_ns,
        "start_ns": start_ns,
    }
    if tokens is not None:
        body["tokens"] = tokens
    if conditioned is not None:
        body["conditioned"] = conditioned
    if ask:
        body.update(ask)
    return body
