"""docs/robots.md's launch file for a user's own robot, policy and monitor, run as written in
one empty folder: the camera policy of docs/policies.md section 10, the XY table with its
camera of docs/robots.md section 8, and `rtinfer launch my_cell.yaml`; the monitor's report
holds every process's counters."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]


def blocks(page: str, marker: str) -> dict[str, str]:
    text = (ROOT / "docs" / page).read_text()
    return dict(re.findall(rf"<!-- {marker}: (\S+) -->\s*```\w*\n(.*?)```", text, re.S))


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
def test_the_launch_file_of_robots_md_runs_the_users_robot_policy_and_monitor(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    policy = blocks("policies.md", "camera-example")
    for name in ("action_spec.json", "obs_spec.json"):
        (tmp_path / name).write_text(policy[name])
    for step in (
        ["python", "-c", policy["python"]],
        ["bash", "-euo", "pipefail", "-c", policy["package.sh"]],
    ):
        r = subprocess.run(step, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    robot, camera = blocks("robots.md", "robots-example"), blocks("robots.md", "camera-example")
    cell = blocks("robots.md", "cell-launch-example")
    assert list(cell) == ["my_cell.yaml", "run.sh"]
    for name, text in (
        ("my_robot.py", robot["my_robot.py"]),
        ("my_robot.yaml", robot["my_robot.yaml"]),
        ("camera_robot.py", camera["camera_robot.py"]),
        ("my_cell.yaml", cell["my_cell.yaml"]),
    ):
        (tmp_path / name).write_text(text)
    run = cell["run.sh"]
    if shutil.which("jq") is None:  # the page's last line reads the report; so does this test
        run = run[: run.index("jq ")]
    r = subprocess.run(
        ["bash", "-e", "-c", run],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    if shutil.which("jq"):
        assert r.stdout.strip() == "[true,true,0,0]", r.stdout
    report = json.loads((tmp_path / "my-run" / "monitor_report.json").read_text())
    nodes = report["nodes"]
    assert report["cycles"] > 0 and set(nodes) >= {"controller", "policy"}, report["nodes"]
    assert nodes["controller"]["counters"]["chunks_accepted"] > 0
    assert nodes["policy"]["counters"]["obs_bad"] == 0
    assert (
        json.loads((tmp_path / "my-run" / "robot_report.json").read_text())["controller"][
            "chunks_accepted"
        ]
        > 0
    )
