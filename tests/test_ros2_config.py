"""The bridge's settings as one dataclass (rtinfer_ros2.config), without ROS 2: docs/ros2.md's
example runs as written and prints what the page says; the shipped robot file's `hardware:`
is read key for key; an unknown key or an unusable value is refused in one line; and
`python -m rtinfer_ros2` with a misspelt key exits 2 naming the key it meant."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rtinfer_ros2.config import ROS2RobotConfig

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "ros2.md").read_text()


def block(marker: str) -> str:
    m = re.search(rf"<!-- {re.escape(marker)} -->\s*```\w*\n(.*?)```", PAGE, re.S)
    assert m, f"docs/ros2.md has no block marked <!-- {marker} -->"
    return m.group(1)


def test_the_pages_config_example_prints_what_the_page_says():
    r = subprocess.run(
        [sys.executable, "-c", block("ros2-config-example")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == block("ros2-config-output")


def test_the_shipped_robot_files_hardware_is_read_key_for_key():
    hardware = yaml.safe_load((ROOT / "rtinfer_ros2" / "arm.yaml").read_text())["hardware"]
    config = ROS2RobotConfig.from_hardware(hardware)
    for key, value in hardware.items():
        assert getattr(config, key) == value, key
    assert config.node == "rtinfer_bridge" and config.wait_s == 10.0  # the defaults


@pytest.mark.parametrize(
    "hardware, says",
    [
        ({"controler": "forward"}, "'controler' (did you mean 'controller'?) are not ROS2Robot's"),
        ({"controller": "position"}, "controller 'position' is not one of"),
        ({"reliability": "best-effort"}, "reliability 'best-effort' is not one of"),
        ({"obs_hz": 0}, "obs_hz 0 is not a positive number"),
        ({"silent_ms": float("nan")}, "silent_ms nan is not a positive number"),
        ({"lead_ms": -1}, "lead_ms -1 is not a number >= 0"),
        ({"depth": 2.5}, "depth 2.5 is not a queue depth"),
    ],
)
def test_an_unknown_key_or_an_unusable_value_is_refused_in_one_line(hardware, says):
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        ROS2RobotConfig.from_hardware(hardware)
    assert str(e.value).startswith("ros2 bridge: ") and "\n" not in str(e.value)


def test_every_unusable_value_is_named_at_once():
    with pytest.raises(ValueError) as e:
        ROS2RobotConfig(obs_hz=-1, wait_s=0, controller="x")
    assert all(k in str(e.value) for k in ("obs_hz -1", "wait_s 0", "controller 'x'"))


def test_the_bridge_with_a_misspelt_key_exits_2_naming_the_key_it_meant(tmp_path):
    """Refused before the bridge needs ROS 2 (the check runs with or without rclpy); the
    policy package is the shipped one, so the robot file is the only thing wrong."""
    pytest.importorskip("rclpy", reason="without rclpy the bridge stops earlier: install line")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer_ros2",
            "--config",
            "rtinfer_ros2:arm.yaml",
            "--model",
            "models/zoo/arm-reach-bc",
            "--obs",
            f"ipc://{tmp_path}/obs",
            "--actions",
            f"ipc://{tmp_path}/act",
            "--set",
            "obs_rate=20",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "'obs_rate' (did you mean 'obs_hz'?)" in r.stderr
