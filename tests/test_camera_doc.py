"""The camera examples of docs/policies.md (section 10) and docs/robots.md ("Connecting a
camera"), run as written in one empty folder: the camera policy exported, packaged and
checked, then the XY table of docs/robots.md section 8 with its camera, as a real
controllers.run process, served by a real inference node process."""

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
def test_the_camera_policy_and_the_camera_robot_run_as_written(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    policy = blocks("policies.md", "camera-example")
    assert list(policy) == ["action_spec.json", "obs_spec.json", "python", "package.sh"]
    for name in ("action_spec.json", "obs_spec.json"):
        (tmp_path / name).write_text(policy[name])
    r = subprocess.run(
        [sys.executable, "-c", policy["python"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", policy["package.sh"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout.splitlines()[-1])
    assert check["ok"] and check["kind"] == "chunk" and check["inputs"] == ["overhead", "xy"]

    robot, camera = blocks("robots.md", "robots-example"), blocks("robots.md", "camera-example")
    assert list(camera) == ["camera_robot.py", "run.sh"]
    for name, text in (
        ("my_robot.py", robot["my_robot.py"]),
        ("my_robot.yaml", robot["my_robot.yaml"]),
        ("camera_robot.py", camera["camera_robot.py"]),
    ):
        (tmp_path / name).write_text(text)
    run = camera["run.sh"]
    if shutil.which("jq") is None:  # the page's last line reads the report; so does this test
        run = run[: run.index("jq ")]
    r = subprocess.run(
        ["bash", "-e", "-c", run],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    if shutil.which("jq"):
        assert r.stdout.strip() == "[true,true,0]", r.stdout
    c = json.loads((tmp_path / "camera-report.json").read_text())["controller"]
    assert c["obs_sent"] > 0 and c["obs_bad"] == 0 and c["chunks_accepted"] > 0, c
    assert not any(v for k, v in c.items() if k.startswith("rejected_")), c
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
