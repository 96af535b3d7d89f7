"""docs/policies.md's LeRobot flow examples (SmolVLA, Diffusion Policy), run as written: each
`lerobot-flow-example` shell block in an empty folder, in the LeRobot venv
(`.venv-lerobot/bin/python -m pytest tests/test_lerobot_flow_doc.py`); skips elsewhere."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "policies.md").read_text()
    return re.findall(r"<!-- lerobot-flow-example: (\S+) -->\s*```\w*\n(.*?)```", text, re.S)


@pytest.mark.parametrize("name", ["smolvla", "diffusion"])
def test_the_lerobot_example_packages_and_checks_as_written(name, tmp_path):
    found = dict(blocks())
    if not found:
        pytest.skip(
            "docs/policies.md has no lerobot-flow-example blocks yet (the SmolVLA and "
            "Diffusion Policy sections are merged by the coordinator)"
        )
    assert name in found, f"docs/policies.md has no `lerobot-flow-example: {name}` block"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", found[name]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    check = json.loads(r.stdout.strip().splitlines()[-1])
    assert check["ok"] and check["kind"] == "flow" and check["levels"] == [10, 4, 2, 1]
    card = json.loads(next(tmp_path.glob("*-policy/card.json")).read_text())
    assert all(lv["parity_max_abs"] <= 1e-4 for lv in card["levels"])
