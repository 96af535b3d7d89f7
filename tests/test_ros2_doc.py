"""docs/ros2.md's "Connecting a ROS 2 robot" examples, run as written from the repository root
inside a network namespace: the shipped reach policy brings the plain rclpy arm's hand to its
target through the bridge, with setpoints per tick and with each chunk as one trajectory, and
a camera policy sees the arm's camera topic; a plain rclpy subscriber reads rtinfer's figures
off /diagnostics."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
from tests.ros2_host import ROOT, RosHost, available  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)


def blocks(marker: str) -> dict[str, str]:
    text = open(f"{ROOT}/docs/ros2.md").read()
    return dict(re.findall(rf"<!-- {marker}: (\S+) -->\s*```\w*\n(.*?)```", text, re.S))


def run_example(marker: str, run_dir: str) -> str:
    """The example's run.sh in a network namespace, then its check.py: what that printed."""
    b = blocks(marker)
    assert set(b) == {"run.sh", "check.py"}
    env_path = f"{sys.prefix}/bin"
    shutil.rmtree(f"{ROOT}/{run_dir}", ignore_errors=True)
    try:
        with RosHost("rtros2d") as host:
            r = host.run(
                "h",
                ["env", f"PATH={env_path}:/usr/bin:/bin", "bash", "-e", "-c", b["run.sh"]],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=180,
            )
        assert r.returncode == 0, r.stderr[-2000:]
        out = subprocess.run(
            [sys.executable, "-c", b["check.py"]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout
    finally:
        shutil.rmtree(f"{ROOT}/{run_dir}", ignore_errors=True)


def test_the_worked_example_reaches_the_target_as_written():
    out = run_example("ros2-bridge-example", "runs/ros2-arm")
    m = re.match(r"hand ([\d.]+) cm from the target after (\d+) chunks; bridge ", out)
    assert m and float(m[1]) < 2.0 and int(m[2]) > 20, out


def test_the_chunk_as_one_trajectory_example_reaches_the_target_as_written():
    out = run_example("ros2-chunk-example", "runs/ros2-chunk")
    m = re.match(
        r"hand ([\d.]+) cm from the target; (\d+) trajectories of (\d+) points at "
        r"most, each sent (\d+) ms or more before its first point; transit [\d.]+ ms "
        r"p50; bridge sent (\d+)",
        out,
    )
    assert m and float(m[1]) < 2.0 and int(m[2]) > 20 and int(m[3]) > 1, out
    assert int(m[4]) >= 10 and int(m[5]) == int(m[2]), out  # the lead (lead_ms: 10)


def test_the_camera_example_sends_the_base_where_the_frames_say_as_written():
    out = run_example("ros2-camera-example", "runs/ros2-camera")
    m = re.match(
        r"base at ([\d.-]+) rad \(red 102: 0.400\); camera \{'frames': (\d+), "
        r"'frame_silent': \d+, 'frame_bad': 0, 'frame_future': 0\}",
        out,
    )
    assert m and abs(float(m[1]) - 0.4) < 0.01 and int(m[2]) > 20, out


def test_the_diagnostics_example_reads_rtinfers_figures_off_ros2_as_written():
    out = run_example("ros2-diagnostics-example", "runs/ros2-diag")
    m = re.match(
        r"8 arrays; e2e p50 ([\d.]+) ms over (\d+) cycles, (\d+) missed, budget level "
        r"(\d+); the bridge sent (\d+) commands; statuses: (.*)",
        out,
    )
    assert m and 0 < float(m[1]) < 100 and int(m[2]) > 10 and int(m[4]) == 0, out
    assert int(m[5]) > 100 and int(m[3]) <= int(m[2]), out
    assert m[6].split(", ") == ["controller", "infer", "rtinfer/bridge", "rtinfer/cycles"], out
