"""docs/fleet.md, "A fleet on Ray", runs as written: its FLEET.yaml, and its `rtinfer fleet`
lines in order (up, status, status --json, down) against a Ray head with the doc's own
`--resources` and `--system-config` (started with ray.cluster_utils in place of `ray start`,
so the test stops what it started and nothing else); both hosts come up and take one robot
each. The doc's bad-FLEET.yaml line is what `fleet up` says, exit 2. No raylet is left."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300, method="thread")  # a hang inside Ray ends too


def section() -> str:
    text = (ROOT / "docs/fleet.md").read_text()
    return text[text.index("### A fleet on Ray") :]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), re.S)


def commands() -> tuple[list[str], list[list[str]]]:
    """(the `ray start` line's words, each `rtinfer fleet` line's words)."""
    lines = blocks("sh")[0].replace("\\\n", " ").splitlines()
    words = [shlex.split(line, comments=True) for line in lines]
    ray_start = next(w for w in words if w[:2] == ["ray", "start"])
    return ray_start, [w for w in words if w[:2] == ["rtinfer", "fleet"]]


def rtinfer(words: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", *words[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def raylets() -> list[str]:
    return subprocess.run(["pgrep", "-f", "raylet"], capture_output=True, text=True).stdout.split()


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "fleet.yaml").write_text(blocks("yaml")[0])
    (tmp_path / "models").symlink_to(ROOT / "models")  # the doc's relative model path
    return tmp_path


def test_the_docs_fleet_comes_up_places_each_robot_and_goes_down(workdir):
    ray_start, fleet = commands()
    opt = dict(zip(ray_start[2:], ray_start[3:]))
    before = raylets()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "resources": json.loads(opt["--resources"]),
            "_system_config": json.loads(opt["--system-config"]),
        },
    )
    try:
        assert [w[2] for w in fleet] == ["up", "status", "status", "down"]
        up = rtinfer(fleet[0], workdir)
        assert up.returncode == 0, up.stderr
        end, st = time.monotonic() + 150, {}
        while time.monotonic() < end:  # the nodes load the model meanwhile
            st = json.loads(rtinfer(fleet[2], workdir).stdout)
            if all(r["state"] == "placed" for r in st["robots"].values()) and all(
                h["state"] == "up" for h in st["hosts"].values()
            ):
                break
            time.sleep(1.0)
        assert {r: x["host"] for r, x in st["robots"].items()} == {
            "cell-1": "gpu-1",
            "cell-2": "gpu-2",
        }, st
        table = rtinfer(fleet[1], workdir)
        assert table.returncode == 0 and "gpu-1" in table.stdout and "cell-2" in table.stdout
        down = rtinfer(fleet[3], workdir)
        assert down.returncode == 0, down.stderr
    finally:
        cluster.shutdown()
    assert raylets() == before, "a raylet was left behind"


def test_a_fleet_file_with_an_unknown_host_is_one_line_with_the_fix(workdir):
    path = workdir / "fleet.yaml"
    path.write_text(path.read_text().replace("host: gpu-1}", "host: gpu-3}"))
    said = re.search(r"```\n(rtinfer fleet: .*?)\n```", section()).group(1)
    got = rtinfer(["rtinfer", "fleet", "up", "fleet.yaml"], workdir)
    assert got.returncode == 2
    assert got.stderr.strip() == said
