"""docs/ros2.md says what the bridge does, checked against the code without ROS 2: every
hardware key of the table is one ROS2RobotConfig field (and each field is in the table);
the JointState counters the page lists are exactly the ones the bridge keeps, each saying
whether the message is refused or taken; the default observation and an `observe` function
are given with types and shapes; and the page's launch file for recording a bridge run is a
valid launch file, recorded into the run directory the launcher creates."""

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from rtinfer_ros2.config import ROS2RobotConfig
from rtinfer_ros2.joint_states import NOTED, REFUSALS

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "ros2.md").read_text()


def marked_table(marker: str) -> list[list[str]]:
    m = re.search(rf"<!-- {re.escape(marker)} -->\s*\n((?:\|.*\|\n)+)", PAGE)
    assert m, f"docs/ros2.md has no table marked <!-- {marker} -->"
    return [
        [c.strip() for c in ln.strip().strip("|").split("|")]
        for ln in m.group(1).strip().splitlines()[2:]
    ]


def test_the_hardware_table_is_what_the_bridge_takes():
    keys = {k.strip("` ") for row in marked_table("ros2-hardware") for k in row[0].split(",")}
    takes = {f.name for f in fields(ROS2RobotConfig)}
    assert keys == takes, (sorted(keys - takes), sorted(takes - keys))


def test_the_joint_state_counters_are_the_bridges_and_say_refused_or_taken():
    rows = {r[0].strip("`"): r for r in marked_table("ros2-joint-state-counters")}
    assert set(rows) == set(REFUSALS) | set(NOTED) | {"js_silent"}, sorted(rows)
    for kind in REFUSALS:
        assert rows[kind][2] == "refused", rows[kind]
    for kind in NOTED:
        assert rows[kind][2] == "taken", rows[kind]
    assert "number of positions" in rows["js_names"][1]


def test_the_default_observation_and_an_observe_function_say_type_and_shape():
    assert "`joints`: float32 [2N]" in PAGE
    assert re.search(r"returns a dict of name -> numpy array", PAGE)


def test_the_recording_launch_file_is_valid_and_records_into_its_run_directory(tmp_path):
    m = re.search(r"<!-- ros2-record-example: (\S+) -->\s*```\w*\n(.*?)```", PAGE, re.S)
    assert m and m.group(1) == "arm_record.yaml", "no recording launch file on the page"
    (tmp_path / "arm_record.yaml").write_text(m.group(2))
    assert "--record runs/ros2-record/run.mcap" in PAGE and "--run-dir runs/ros2-record" in PAGE
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "launch",
            str(tmp_path / "arm_record.yaml"),
            "--check",
            "--run-dir",
            str(tmp_path / "run"),
            "--record",
            str(tmp_path / "run" / "run.mcap"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
