"""python -m rtinfer_ros2: its --help anywhere, and one line saying how to install ROS 2 when
rclpy is missing (the core install)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bridge(*args):
    return subprocess.run(
        [sys.executable, "-m", "rtinfer_ros2", *args], capture_output=True, text=True, timeout=120
    )


def test_help_names_the_robot_file_and_the_options():
    r = bridge("--help")
    assert r.returncode == 0
    assert "rtinfer_ros2:arm.yaml" in r.stdout and "--config" in r.stdout


@pytest.mark.skipif(importlib.util.find_spec("rclpy") is not None, reason="rclpy is installed")
def test_without_ros2_it_says_how_to_install_it_in_one_line():
    r = bridge(
        "--config",
        "rtinfer_ros2:arm.yaml",
        "--model",
        "models/zoo/arm-reach-bc",
        "--obs",
        "ipc:///tmp/x",
        "--actions",
        "ipc:///tmp/y",
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "pip install rtinfer[ros2]" in r.stderr


def test_the_ros2_launch_file_checks_without_ros2():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.launch.supervisor",
            "rtinfer_ros2/arm_reach_launch.yaml",
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0 and ": ok (" in out.stdout, out.stdout + out.stderr
