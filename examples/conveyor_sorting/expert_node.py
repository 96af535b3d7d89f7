"""The scripted expert as a policy node: obs in, streamed action-chunk waypoints out.

It answers the newest observation (latest-only), stamps `obs_recv`, `first_token` and
`publish`, and sends each waypoint as its own `action_chunk` message, as the inference
node does, so the robot side cannot tell the two apart.

    python -m examples.conveyor_sorting.expert_node --obs ipc:///tmp/obs --actions ipc:///tmp/act \
        [--curve-secret K.key_secret --curve-map curve.json]
"""
from __future__ import annotations

import argparse
import signal
import sys

from rtinfer.transport.action_chunk import carried_stamps, waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.transport.wire import now_ns

from .config import CellConfig, tokenizer_config
from .expert import ScriptedExpert
from .observe import obs_from_body


def serve(obs_endpoint: str, actions_endpoint: str, *, seconds: float | None = None,
          cell: CellConfig | None = None, curve=None) -> dict:
    """Serve until `seconds` pass or SIGTERM/SIGINT; returns counters.

    curve: bus ``curve=`` for both sockets (keys.curve_configs: per endpoint)."""
    cell = cell or CellConfig()
    tcfg = tokenizer_config(cell)
    expert = ScriptedExpert(cell, tcfg)
    sub = Subscriber(obs_endpoint, ["obs"], latest_only=True, curve=curve)
    pub = Publisher(actions_endpoint, "expert", curve=curve)  # a policy binds its action endpoint
    counters = {"cycles": 0, "skipped": 0, "bad_obs": 0}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    end = None if seconds is None else now_ns() + int(seconds * 1e9)
    try:
        while not stop and (end is None or now_ns() < end):
            env = sub.poll_latest(timeout_ms=100).get("obs")
            if env is None:
                continue
            recv_ns = now_ns()
            try:
                obs = obs_from_body(env.body)
            except (KeyError, ValueError):
                counters["bad_obs"] += 1
                continue
            tokens, values = expert.act_tokens(obs)
            stamps = carried_stamps(env.stamps, recv_ns)
            stamps["first_token"] = now_ns()
            for i in range(tcfg.horizon):
                pub.publish("action_chunk", waypoint_body(
                    env.seq, i, tcfg.horizon, values[i], spec=tcfg.hash, period_ns=tcfg.period_ns,
                    start_ns=tcfg.period_ns, dest=env.src, tokens=tokens[i]), dict(stamps))
            counters["cycles"] += 1
    except KeyboardInterrupt:
        pass
    finally:
        counters["skipped"] = sub.counters["superseded"]
        sub.close()
        pub.close()
    return counters


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--obs", required=True)
    ap.add_argument("--actions", required=True)
    ap.add_argument("--seconds", type=float, default=None)
    add_curve_arguments(ap)
    a = ap.parse_args(argv)
    curve = curve_from_args(ap, a, binds=[a.actions], connects=[a.obs])
    print(serve(a.obs, a.actions, seconds=a.seconds, curve=curve), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
