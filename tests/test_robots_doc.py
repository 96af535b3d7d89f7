"""docs/robots.md's worked example, run as written: the driver, the robot file and the
policy's spec saved as the page says, the commands of step 4 run from that folder (the robot
process and the stand-in policy), then step 5's check of the report."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> dict[str, str]:
    text = (ROOT / "docs" / "robots.md").read_text()
    return dict(re.findall(r"<!-- robots-example: (\S+) -->\s*```\w*\n(.*?)```", text, re.S))


@pytest.mark.slow  # 5-11 s on 2 cores (a whole launch): `make test-slow` runs it
def test_the_worked_example_connects_the_xy_table_as_written(tmp_path):
    b = blocks()
    assert set(b) == {
        "my_robot.py",
        "my_robot.yaml",
        "action_spec.json",
        "run.sh",
        "send_chunks.py",
        "check.sh",
    }
    for name in ("my_robot.py", "my_robot.yaml", "action_spec.json", "send_chunks.py"):
        (tmp_path / name).write_text(b[name])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(
        ["bash", "-e", "-c", b["run.sh"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    c = report["controller"]
    assert c["chunks_accepted"] > 20 and not any(
        v for k, v in c.items() if k.startswith("rejected_")
    )
    assert c["obs_sent"] >= c["chunks_accepted"] and c["obs_bad"] == 0  # each chunk answers one
    assert abs(report["xy"][0] - 0.3) < 1e-3 and abs(report["xy"][1] - 0.2) < 1e-3
    # e2e counts applied cycles: a chunk superseded before its first setpoint (two in one tick
    # on a loaded machine) or accepted as the run ends has none (74 of 76 in one busy run)
    assert report["pen"] == 1.0 and 20 < report["e2e_ms"]["count"] <= c["chunks_accepted"]
    if shutil.which("jq"):  # step 5 as written
        out = subprocess.run(
            ["bash", "-c", b["check.sh"]], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout
        xy, pen = report["xy"], report["pen"]
        assert json.loads(out) == [True, True, 0, xy, pen]
