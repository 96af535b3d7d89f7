"""The inference node's own slack across two hosts whose clocks differ by 5 s.

    host a "gpu"   10.231.0.1: rtinfer.inference.node in a time namespace whose
                   CLOCK_MONOTONIC runs OFFSET_S ahead; binds actions tcp://10.231.0.1:5556
    host b "robot" 10.231.0.2: a real ControllerNode (point-mass plant) that publishes obs
                   at 20 Hz and its traces on tcp://10.231.0.2:5555 (this module, run as
                   `python -m tests.faults.test_node_slack robot ...`)

The robot also watches the node's waypoints and health on one socket (PUB order: a health
message follows the cycle its slack gauge is from) and brackets each cycle's true slack,
taken on its last waypoint (the node's slack is the last waypoint's: a chunk is on time only
when its last waypoint is), on one clock at a time: deadline - (recv of the last waypoint -
capture) on the robot's, deadline - (its publish - obs_recv) on the node's. The old computation, deadline - (publish -
capture), mixes the clocks and is off by the offset. Needs root, `ip` and time
namespaces; skips with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.faults import netns
from tests.faults.common import PY, ROOT, stop, wait_for

A, B = netns.ADDRS["a"], netns.ADDRS["b"]
OBS, ACTIONS = f"tcp://{B}:5555", f"tcp://{A}:5556"
OFFSET_S = 5
DEADLINE_NS = 100_000_000
HEALTH_WANTED = 4  # health messages with a slack gauge before the robot stops


def _time_ns_available() -> str | None:
    try:
        r = subprocess.run(
            ["unshare", "--time", "--monotonic", str(OFFSET_S), "--fork", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare: {e}"
    return None if r.returncode == 0 else f"no time namespace here: {r.stderr.strip()}"


# --- the robot process ------------------------------------------------------------------------
class Plant:
    """A carriage that does not move: the controller's loop and stamps are what matter here."""

    def __init__(self):
        from controllers.hardware import RobotState

        self.state = RobotState(0, np.array([0.0, 0.0, 0.2]), np.zeros(3))

    def read(self):
        return self.state

    def write(self, cmd) -> None:
        pass


def robot(model: str, seconds: float, out: str) -> None:
    from controllers.node import ControllerConfig, ControllerNode
    from rtinfer.model.action_tokens import TokenizerConfig
    from rtinfer.transport.bus import Publisher, Subscriber
    from rtinfer.transport.wire import now_ns
    from tests.conftest import gantry_control, random_obs_body

    pub = Publisher(OBS, "controller", bind=True)
    sub = Subscriber(ACTIONS, ["action_chunk", "command"])
    watch = Subscriber(ACTIONS, ["action_chunk", "health"])
    tok = TokenizerConfig.load(Path(model) / "tokenizer.json")
    cfg = ControllerConfig(
        tokenizer=tok,
        control=gantry_control(
            low=tok.low[:3], high=tok.high[:3], mass=(2.0,) * 3, hold_decel=(2.0,) * 3
        ),
        deadline_ns=DEADLINE_NS,
        chunk_interval_ns=50_000_000,
    )
    rng, rec, last = np.random.default_rng(0), {"health": [], "cycles": 0}, {}
    end = now_ns() + int(seconds * 1e9)

    def on_tick(state, now: int) -> None:
        if node.counters["ticks"] % 50 == 0:
            pub.publish("obs", random_obs_body(rng), {"capture": now})
        for _ in range(16):
            env = watch.recv(0)
            if env is None:
                break
            s = env.stamps
            if env.topic == "action_chunk" and env.body["index"] == env.body["count"] - 1:
                rec["cycles"] += 1
                last.update(
                    robot_low=(DEADLINE_NS - (s["recv"] - s["capture"])) / 1e3,
                    node_high=(DEADLINE_NS - (s["publish"] - s["obs_recv"])) / 1e3,
                    old=(DEADLINE_NS - (s["publish"] - s["capture"])) / 1e3,
                )
            elif env.topic == "health" and "slack_us" in env.body["gauges"] and last:
                rec["health"].append(
                    {**last, "gauges": env.body["gauges"], "counters": env.body["counters"]}
                )
        if len(rec["health"]) >= HEALTH_WANTED or now > end:
            node.state = "stopped"

    node = ControllerNode(Plant(), cfg, sub, pub, on_tick=on_tick)
    node.run(None)
    rec["controller"] = dict(node.counters)
    Path(out).write_text(json.dumps(rec))
    for s in (pub, sub, watch):
        s.close()


# --- the test ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_own_slack_is_right_despite_a_5_s_clock_offset_between_hosts(tiny_model_dir):
    why = netns.available() or _time_ns_available()
    if why is not None:
        pytest.skip(f"needs network and time namespaces: {why}")
    d = Path(tempfile.mkdtemp(prefix="rts-slack-"))
    out, log = d / "robot.json", d / "node.log"
    with netns.HostPair("rts") as hosts, open(log, "w") as node_log:
        # --kill-child: SIGTERM to unshare reaches the node, which is its child
        node = hosts.popen(
            "a",
            [
                "unshare",
                "--time",
                "--monotonic",
                str(OFFSET_S),
                "--fork",
                "--kill-child=SIGTERM",
                PY,
                "-m",
                "rtinfer.inference.node",
                "--model",
                str(tiny_model_dir),
                "--obs",
                OBS,
                "--actions",
                ACTIONS,
            ],
            cwd=ROOT,
            stdout=node_log,
            stderr=subprocess.STDOUT,
        )
        bot = hosts.popen(
            "b",
            [
                PY,
                "-m",
                "tests.faults.test_node_slack",
                "--model",
                str(tiny_model_dir),
                "--seconds",
                "25",
                "--out",
                str(out),
            ],
            cwd=ROOT,
        )
        try:
            assert wait_for(lambda: bot.poll() is not None, 40), "the robot never finished"
        finally:
            stop(bot)
            stop(node)
    err = log.read_text()
    assert bot.returncode == 0 and out.exists(), err
    r = json.loads(out.read_text())
    assert len(r["health"]) >= HEALTH_WANTED, (r, err)
    assert r["controller"]["chunks_accepted"] > 0
    print("slack figures (us):", json.dumps(r["health"]))
    for h in r["health"]:
        g = h["gauges"]
        # the node found the offset (robot - node = -OFFSET_S) to well within a millisecond ...
        assert abs(g["robot_clock_offset_us"] + OFFSET_S * 1e6) < 1000, h
        # ... so its slack lies in the one-clock bracket of the true slack (+- 1 ms) ...
        assert h["robot_low"] - 1000 <= g["slack_us"] <= h["node_high"] + 1000, h
        # ... where the old, clock-mixing computation is off by the offset
        assert abs(h["old"] - g["slack_us"] + OFFSET_S * 1e6) < 50_000, h
    assert r["health"][-1]["counters"]["budget_level"] == 0  # no false alarm from -5 s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the robot side of test_node_slack")
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    robot(a.model, a.seconds, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
