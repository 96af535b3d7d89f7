"""docs/ros2.md's "Connecting a ROS 2 robot" example, run as written from the repository root
inside a network namespace: the shipped reach policy brings the plain rclpy arm's hand to its
target through the bridge."""
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


def blocks() -> dict[str, str]:
    text = open(f"{ROOT}/docs/ros2.md").read()
    return dict(re.findall(r"<!-- ros2-bridge-example: (\S+) -->\s*```\w*\n(.*?)```", text,
                           re.S))


def test_the_worked_example_reaches_the_target_as_written():
    b = blocks()
    assert set(b) == {"run.sh", "check.py"}
    env_path = f"{sys.prefix}/bin"
    shutil.rmtree(f"{ROOT}/runs/ros2-arm", ignore_errors=True)
    try:
        with RosHost("rtros2d") as host:
            r = host.run("h", ["env", f"PATH={env_path}:/usr/bin:/bin", "bash", "-e", "-c",
                               b["run.sh"]], cwd=ROOT, capture_output=True, text=True,
                         timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
        out = subprocess.run([sys.executable, "-c", b["check.py"]], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        m = re.match(r"hand ([\d.]+) cm from the target after (\d+) chunks; bridge ", out.stdout)
        assert m and float(m[1]) < 2.0 and int(m[2]) > 20, out.stdout
    finally:
        shutil.rmtree(f"{ROOT}/runs/ros2-arm", ignore_errors=True)
