"""A run's report has every process's counters: the monitor's report holds each node's last
health (its state, counters and gauges), so a policy node's obs_bad, frame_* and obs_floods,
which the node writes to no file, are in monitor_report.json at the end. Real processes: a
policy node, the monitor, and a robot whose observations the policy refuses."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from rtinfer.transport.bus import Publisher
from rtinfer.transport.wire import now_ns

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "models/zoo/arm-reach-bc"


def test_the_monitor_report_has_the_policy_nodes_counters(tmp_path):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("robot", "act", "ctl")}
    robot = Publisher(eps["robot"], "robot", bind=True)

    def py(*a):
        return subprocess.Popen(
            [sys.executable, "-m", *a],
            cwd=ROOT,
            text=True,  # noqa
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    monitor = py(
        "rtinfer.monitor.node",
        "--listen",
        eps["robot"],
        eps["act"],
        "--control",
        eps["ctl"],
        "--report",
        str(tmp_path / "monitor_report.json"),
    )
    node = py(
        "rtinfer.inference.node",
        "--model",
        str(POLICY),
        "--obs",
        eps["robot"],
        "--actions",
        eps["act"],
        "--control",
        eps["ctl"],
        "--name",
        "policy",
    )
    sent = 0
    try:
        assert "ready" in monitor.stdout.readline() and "ready" in node.stdout.readline()
        end = time.monotonic() + 4
        while time.monotonic() < end:  # not what the policy's spec names: obs_bad there
            robot.publish(
                "obs",
                {"values": {"nothing": np.zeros(1, np.float32)}, "ints": {}},
                {"capture": now_ns()},
            )
            sent += 1
            time.sleep(0.05)
    finally:
        node.send_signal(signal.SIGINT)
        node.communicate(timeout=30)
        time.sleep(0.5)  # the node's last health, then the monitor stops
        monitor.send_signal(signal.SIGINT)
        monitor.communicate(timeout=30)
        robot.close()
    nodes = json.loads((tmp_path / "monitor_report.json").read_text())["nodes"]
    policy = nodes["policy"]
    assert 0 < policy["counters"]["obs_bad"] <= sent, policy
    assert "obs_floods" in policy["counters"] and "frame_bad" in policy["counters"]
    assert policy["state"] and isinstance(policy["gauges"], dict)
    assert policy["counters_as_of_s"] >= 0
