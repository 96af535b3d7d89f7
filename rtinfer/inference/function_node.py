"""A policy written as a Python function, served as a policy node: obs in, streamed waypoints out.

    counters = serve(act, obs_endpoint, actions_endpoint, spec=..., period_ns=..., start_ns=...)

`act(body)` maps one `obs` body to its chunk: `(values, tokens)`, values (H, D) float32 and
tokens (H, D) int or None (a continuous chunk). It answers the newest observation
(latest-only), stamps `obs_recv`, `first_token` (the chunk computed) and `publish`, and sends
each waypoint as its own `action_chunk` message to the robot whose observation it answers,
as the inference node does, so the robot side cannot tell the two apart. A body `act`
refuses (KeyError, ValueError) is counted (bad_obs) and not answered. Scripted experts use
it (examples/*/expert_node.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rtinfer.realtime.spin import on_signals
from rtinfer.transport.action_chunk import carried_stamps, waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

Act = Callable[[dict], "tuple[np.ndarray, np.ndarray | None]"]


def serve(
    act: Act,
    obs_endpoint: str,
    actions_endpoint: str,
    *,
    spec: str,
    period_ns: int,
    start_ns: int,
    name: str = "expert",
    seconds: float | None = None,
    curve=None,
) -> dict:
    """Serve until `seconds` pass or SIGTERM/SIGINT; returns the counters (cycles, skipped,
    bad_obs). spec: the hash the waypoints carry (a tokenizer's with tokens, an action
    spec's without). curve: bus ``curve=`` for both sockets."""
    sub = Subscriber(obs_endpoint, ["obs"], latest_only=True, curve=curve)
    pub = Publisher(actions_endpoint, name, curve=curve)  # a policy binds its action endpoint
    counters = {"cycles": 0, "skipped": 0, "bad_obs": 0}
    stop: list[int] = []
    end = None if seconds is None else now_ns() + int(seconds * 1e9)
    try:
        with on_signals(stop.append):
            while not stop and (end is None or now_ns() < end):
                env = sub.poll_latest(timeout_ms=100).get("obs")
                if env is None:
                    continue
                recv_ns = now_ns()
                try:
                    values, tokens = act(env.body)
                except (KeyError, ValueError):
                    counters["bad_obs"] += 1
                    continue
                stamps = carried_stamps(env.stamps, recv_ns)
                stamps["first_token"] = now_ns()
                for i in range(len(values)):
                    pub.publish(
                        "action_chunk",
                        waypoint_body(
                            env.seq,
                            i,
                            len(values),
                            values[i],
                            spec=spec,
                            period_ns=period_ns,
                            start_ns=start_ns,
                            dest=env.src,
                            tokens=None if tokens is None else tokens[i],
                        ),
                        dict(stamps),
                    )
                counters["cycles"] += 1
    finally:
        counters["skipped"] = sub.counters["superseded"]
        sub.close()
        pub.close()
    return counters
