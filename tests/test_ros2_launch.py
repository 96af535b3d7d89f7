"""rtinfer_ros2/arm_reach_launch.yaml under `rtinfer launch`, in a network namespace: the ROS 2
arm, the bridge as the robot node, the policy and the monitor; the launch ends with the
bridge, and the arm's hand is at the target."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
from rtinfer_ros2.arm_reach import tip  # noqa: E402
from tests.ros2_host import ROOT, RosHost, available  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)


def test_the_launch_file_runs_the_bridge_like_any_robot_node(tmp_path):
    run_dir = tmp_path / "run"
    with RosHost("rtros2l") as host:
        r = host.run(
            "h",
            [
                sys.executable,
                "-m",
                "rtinfer.cli",
                "launch",
                "rtinfer_ros2/arm_reach_launch.yaml",
                "--set",
                "seconds=6",
                "--run-dir",
                str(run_dir),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    report = json.loads((run_dir / "robot_report.json").read_text())
    arm = json.loads((run_dir / "arm.json").read_text())
    assert report["controller"]["chunks_accepted"] > 20 and report["ros2"]["commands"] > 100
    assert np.linalg.norm(tip(arm["pos"]) - (0.35, 0.0, 0.1)) < 0.02
