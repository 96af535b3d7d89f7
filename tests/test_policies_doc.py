"""docs/policies.md's worked example, run as written: its blocks in order in an empty folder
(the action spec saved as the page says, the Python packaging code, the shell commands that
check and serve it in the conveyor demo). Then the same policy packaged for another robot
(other units): the robot refuses it before its first tick, naming both sides, and the demo
fails."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("mujoco")

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "policies.md").read_text()
    return re.findall(r"<!-- policies-example: (\S+) -->\s*```\w*\n(.*?)```", text, re.S)


def env() -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The folder after the page's action spec and Python block ran in it."""
    d = tmp_path_factory.mktemp("policies")
    (kind, spec), (_, code) = blocks()[:2]
    assert kind == "action_spec.json"
    (d / "action_spec.json").write_text(spec)
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=d, capture_output=True, text=True, timeout=300, env=env()
    )
    assert r.returncode == 0, r.stderr
    assert "parity_max_abs" in r.stdout
    return d


@pytest.mark.slow  # 5-11 s on 2 cores (a whole launch): `make test-slow` runs it
def test_the_worked_example_packages_checks_and_serves_as_written(example):
    kinds = [k for k, _ in blocks()]
    assert kinds == ["action_spec.json", "python", "shell"]
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", blocks()[2][1]],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout.splitlines()[0])
    assert check["ok"] and check["kind"] == "chunk" and check["levels"] == 1
    report = json.loads((example / "report.json").read_text())
    assert report["exit_code"] == 0
    c = report["controller"]
    assert c["chunks_accepted"] >= 50 and c["rejected_hash"] == c["rejected_bad"] == 0
    # misses are counted, not forbidden: a busy host may make a cycle late (the monitor
    # counts it), and that is the load's doing, not the example's
    assert report["policy"]["cycles"] >= 50 and 0 <= report["deadline_misses"] <= report["cycles"]


def test_a_policy_for_another_robot_is_refused_before_the_first_tick_and_the_demo_fails(example):
    code = blocks()[1][1].replace(
        'ActionSpec.load("action_spec.json")',
        'replace(ActionSpec.load("action_spec.json"), units=("mm", "mm", "mm", "1"))',
    )
    code = code.replace('"mlp-policy"', '"other-robot"')
    code = "from dataclasses import replace\n" + code
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "demo",
            "--policy",
            "other-robot",
            "--seconds",
            "2",
            "--json",
            "--run-dir",
            "run",
        ],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
    )
    assert r.returncode != 0
    report = json.loads(r.stdout)
    sim_log = (example / "run" / "nominal" / "sim.log").read_text()
    assert (
        "the policy's action spec's units ['mm', 'mm', 'mm', '1'] are not this robot's "
        "['m', 'm', 'm', '1']"
    ) in sim_log and "Traceback" not in sim_log
    assert any("sim" in line and "FAILED" in line for line in report["error"])
