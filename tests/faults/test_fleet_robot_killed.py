"""One robot of a fleet SIGKILLed (issue 29, item 4): launch/conveyor_fleet.yaml with two
cells under the real launcher; sim-1 (cell-1's controller process, `required: true`,
`restart: never`) is killed once both cells are served. A per-robot required node is
required for its own robot (docs/launch.md): robot 1 ends, counted and said, and cell-0 is
served to the end of its run. What cell-0 lost: nothing (its sim ran every second it was
given, the policy and the monitor stopped normally at the end, and its cycles went on).

The policy is the shipped ACT one-shot policy: two robots fit one node on any machine of
this kind, even beside a busy process (tests/test_launch_robots.py says why).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from rtinfer.transport.bus import Subscriber
from tests.faults.common import PY, ROOT, node_pids, stop

SECONDS = 12.0  # sim seconds per cell
WAIT_S = 60.0  # for both cells to be served: start-up on a loaded host


def monitor_counts(health: Subscriber, cond, what: str) -> dict:
    """The monitor's health counters once cond(counters) holds; says what it waited for."""
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        env = health.recv(100)
        if env is not None and env.body.get("node") == "monitor" and cond(env.body["counters"]):
            return env.body["counters"]
    raise AssertionError(f"waited {WAIT_S:g} s for the monitor's health to show {what}")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_killed_robot_ends_that_robot_and_the_other_is_served_to_the_end():
    run = Path(tempfile.mkdtemp(prefix="rtf-fleet-"))  # short: ipc paths are < 108 bytes
    launcher = subprocess.Popen(
        [
            PY,
            "-m",
            "rtinfer.cli",
            "launch",
            "launch/conveyor_fleet.yaml",
            "--run-dir",
            str(run),
            "--set",
            "robots=2",
            "--set",
            f"seconds={SECONDS:g}",
            "--set",
            f"vars.model={ROOT / 'models/zoo/conveyor-act'}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with Subscriber(f"ipc://{run}/control", ["health"]) as health:
            served = monitor_counts(
                health,
                lambda c: (
                    c.get("cycles.controller-0", 0) >= 20 and c.get("cycles.controller-1", 0) >= 20
                ),
                "20 cycles of each cell",
            )
            pid = node_pids(run / "launch.log")["sim-1"][-1]
            os.kill(pid, signal.SIGKILL)
            after = monitor_counts(
                health,
                lambda c: c.get("cycles.controller-0", 0) >= served["cycles.controller-0"] + 20,
                "20 more cycles of cell-0 after the kill",
            )
        out, _ = launcher.communicate(timeout=SECONDS + WAIT_S)
    finally:
        stop(launcher)
    summary = json.loads((run / "launch_summary.json").read_text())
    print("fleet kill:", json.dumps({"served": served, "after": after, "summary": summary}))
    assert launcher.returncode == 3, out[-3000:]  # the run ended normally, a node failed
    assert (
        "robot 1 ended: required node 'sim-1' failed for good (killed by SIGKILL, "
        "0 restarts); 1 of 2 robots go on" in out
    ), out[-3000:]
    assert summary["robots_ended"] == {
        "1": "required node 'sim-1' failed for good (killed by SIGKILL, 0 restarts)",
        "0": "required node 'sim-0' finished",
    }  # the run ended when its last robot did
    nodes = summary["nodes"]
    assert nodes["sim-0"]["state"] == "done" and nodes["sim-1"]["state"] == "failed"
    assert nodes["policy"]["last_exit"] == 0 and nodes["monitor"]["last_exit"] == 0, nodes
    assert nodes["policy"]["restarts"] == 0
    cell0 = json.loads((run / "sim_report-0.json").read_text())
    # sim-0 finished its run by itself ("done" above: its seconds were up, it was not
    # stopped), and its controller kept following chunks after the kill
    assert cell0["controller"]["chunks_accepted"] >= after["cycles.controller-0"], cell0
    mon = json.loads((run / "monitor_report.json").read_text())
    assert mon["robots"]["controller-0"]["cycles"] >= after["cycles.controller-0"]
    assert not (run / "sim_report-1.json").exists()  # killed: no report, as expected
