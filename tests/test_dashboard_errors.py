"""The dashboard names the input that is being dropped for good: chunks of another spec or
for another robot, malformed waypoints, failed hardware reads and writes, observations that
do not fit the policy's model (fed here as the nodes' real `health` messages over ipc)."""

import time

import pytest
from rich.console import Console

from rtinfer.transport.bus import Publisher

pytest.importorskip("rich")


def _render(dash) -> str:
    console = Console(width=200, record=True)
    console.print(dash.render())
    return console.export_text()


def test_dropped_input_shows_as_an_errors_row_and_a_healthy_run_has_none(tmp_path):
    from rtinfer.monitor.dashboard import Dashboard

    ep = f"ipc://{tmp_path}/h"
    pub = Publisher(ep, "sim")
    dash = Dashboard([ep])
    try:

        def send(node, counters):
            end = time.monotonic() + 5
            while dash.latest.get(node, {}).get("counters") != counters and time.monotonic() < end:
                pub.publish(
                    "health", {"node": node, "state": "run", "counters": counters, "gauges": {}}
                )
                dash.poll(50)

        send("controller", {"ticks": 10, "rejected_hash": 0})
        assert dash.errors() == [] and "errors" not in _render(dash)
        send(
            "controller",
            {
                "ticks": 20,
                "rejected_hash": 12,
                "rejected_dest": 3,
                "read_faults": 2,
                "write_faults": 0,
            },
        )
        send("policy", {"obs_bad": 4})
        assert dash.errors() == [
            "12 chunks of another spec (hash) rejected",
            "3 chunks for another robot rejected",
            "robot hardware: 2 failed reads (the robot held)",
            "4 observations did not fit the policy's model",
        ]
        text = _render(dash)
        assert "errors" in text and "12 chunks of another spec" in text
    finally:
        dash.close()
        pub.close()
