"""The scripted expert as a policy node: obs in, streamed action-chunk waypoints out.

It answers the newest observation (latest-only), stamps `obs_recv`, `first_token` and
`publish`, and sends each waypoint as its own `action_chunk` message, as the inference
node does, so the robot side cannot tell the two apart.

    python -m examples.conveyor_sorting.expert_node --obs ipc:///tmp/obs --actions ipc:///tmp/act \
        [--curve-secret K.key_secret --curve-map curve.json]
"""

from __future__ import annotations

import argparse
import sys

from rtinfer.inference import function_node
from rtinfer.transport.curve import add_curve_arguments, curve_from_args

from .config import CellConfig, tokenizer_config
from .expert import ScriptedExpert
from .observe import obs_from_body


def serve(
    obs_endpoint: str,
    actions_endpoint: str,
    *,
    seconds: float | None = None,
    cell: CellConfig | None = None,
    curve=None,
) -> dict:
    """Serve until `seconds` pass or SIGTERM/SIGINT; returns counters.

    curve: bus ``curve=`` for both sockets (keys.curve_configs: per endpoint)."""
    cell = cell or CellConfig()
    tcfg = tokenizer_config(cell)
    expert = ScriptedExpert(cell, tcfg)

    def act(body):
        tokens, values = expert.act_tokens(obs_from_body(body))
        return values, tokens

    return function_node.serve(
        act,
        obs_endpoint,
        actions_endpoint,
        spec=tcfg.hash,
        period_ns=tcfg.period_ns,
        start_ns=tcfg.period_ns,
        curve=curve,
    )


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
