"""docs/policies.md's flow worked example (section 11), run as written: its blocks in order
in an empty folder (the action spec saved as the page says, the Python that exports and
packages the policy, the shell that checks it and serves it in the conveyor demo)."""

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
    return re.findall(r"<!-- flow-example: (\S+) -->\s*```\w*\n(.*?)```", text, re.S)


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
def test_the_flow_example_packages_checks_and_serves_as_written(tmp_path):
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    (kind, spec), (_, code), (_, shell) = blocks()
    assert [k for k, _ in blocks()] == ["action_spec.json", "python", "shell"]
    (tmp_path / "action_spec.json").write_text(spec)
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'steps': 10" in r.stdout
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shell],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout.splitlines()[0])
    assert check["ok"] and check["kind"] == "flow" and check["levels"] == [10, 4, 2, 1]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == 0
    c = report["controller"]
    assert c["chunks_accepted"] >= 30 and c["rejected_hash"] == c["rejected_bad"] == 0
    assert report["policy"]["cycles"] >= 30 and 0 <= report["deadline_misses"] <= report["cycles"]
