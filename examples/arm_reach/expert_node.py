"""The reach expert as a policy node: obs in, streamed continuous action-chunk waypoints out.

It answers the newest observation (latest-only), stamps `obs_recv`, `first_token` (the
chunk computed) and `publish`, and sends each waypoint as its own `action_chunk` message
carrying the arm's action-spec hash, as the inference node does for a continuous-chunk
policy, so the robot side cannot tell the two apart.

    python -m examples.arm_reach.expert_node --obs ipc:///tmp/obs --actions ipc:///tmp/act \
        [--config examples/arm_reach/robot.yaml] [--seconds S]
"""

from __future__ import annotations

import argparse
import sys

from rtinfer.inference import function_node

from .expert import ReachExpert
from .lockstep import ROBOT_YAML, action_spec, load_robot
from .observe import obs_from_body


def serve(
    obs_endpoint: str, actions_endpoint: str, *, config=ROBOT_YAML, seconds: float | None = None
) -> dict:
    """Serve until `seconds` pass or SIGTERM/SIGINT; returns counters."""
    _, control, _ = load_robot(config)
    spec = action_spec(control)
    expert = ReachExpert(control, spec)
    return function_node.serve(
        lambda body: (expert.act(obs_from_body(body)), None),
        obs_endpoint,
        actions_endpoint,
        spec=spec.hash,
        period_ns=spec.period_ns,
        start_ns=spec.start_ns,
        seconds=seconds,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--obs", required=True, help="the robot's obs endpoint (connect)")
    ap.add_argument("--actions", required=True, help="endpoint to bind for action chunks")
    ap.add_argument("--config", default=str(ROBOT_YAML), help="the robot YAML")
    ap.add_argument("--seconds", type=float, default=None)
    a = ap.parse_args(argv)
    try:
        load_robot(a.config)
    except ValueError as e:
        ap.error(str(e))
    print(serve(a.obs, a.actions, config=a.config, seconds=a.seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
