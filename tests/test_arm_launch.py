"""The reach arm as real processes: `rtinfer launch launch/arm_reach.yaml` (controllers.run
with ArmSim, the inference node on ONNX Runtime with the shipped BC policy, the deadline
monitor; real ZeroMQ between them) and its expert twin launch/arm_reach_expert.yaml exit 0
with targets reached and at most one deadline miss (never applied), and bad input to the
robot process is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROBOT = [
    sys.executable,
    "-m",
    "controllers.run",
    "--hardware",
    "examples.arm_reach.sim:ArmSim",
    "--config",
    "examples.arm_reach:robot.yaml",
]


@pytest.mark.slow  # 5-11 s on 2 cores (a whole launch): `make test-slow` runs it
@pytest.mark.parametrize("launch", ["launch/arm_reach.yaml", "launch/arm_reach_expert.yaml"])
def test_launch_reaches_targets_with_a_deadline_miss_at_most_once(tmp_path, launch):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.launch.supervisor",
            launch,
            "--set",
            "seconds=3",
            "--run-dir",
            str(run_dir),
            "--seconds",
            "60",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    robot = json.loads((run_dir / "robot_report.json").read_text())
    monitor = json.loads((run_dir / "monitor_report.json").read_text())
    assert robot["sim_s"] == pytest.approx(3.0) and robot["task"]["reached"] >= 2, robot["task"]
    assert robot["task"]["missed"] == 0
    c = robot["controller"]
    # A miss is allowed once in the run, for a stall of the shared test machine (quiet runs
    # had 0: docs/benchmarks.md); the controller refuses and reports it.
    assert c["chunks_accepted"] >= 40 and c["rejected_hash"] == 0, c
    assert c["rejected_stale"] == c["late_waypoints"], c  # each late waypoint reported
    assert monitor["cycles"] >= 40 and monitor["misses"] <= 1, monitor
    assert 0 < robot["e2e_ms"]["p99"] < 100


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            ["--model", "models/zoo/arm-reach-bc", "--set", "sed=3"],
            "unknown keys ['sed'] for the reach arm",
        ),
        (["--model", "models/zoo/no-such-model"], "models/zoo/no-such-model: no policy spec there"),
        (
            ["--model", "models/zoo/conveyor-act"],
            "action names ['x', 'y', 'z', 'suction'] are not "
            "this robot's ['base', 'shoulder', 'elbow', 'wrist']",
        ),
    ],
)
def test_bad_input_to_the_robot_process_is_one_line_and_exit_2(tmp_path, extra, says):
    proc = subprocess.run(
        ROBOT + ["--obs", f"ipc://{tmp_path}/obs", "--actions", f"ipc://{tmp_path}/act", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and says in lines[0], proc.stderr
