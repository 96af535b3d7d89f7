"""A refused `rtinfer package` leaves --out as it was (issue 29, item 11), and the refusals and
check-model's lines about a wrong chunk or a wrong path say the fix (item 13). Real `rtinfer`
processes on real folders; the good policy's files are compared byte for byte."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
SPEC = {
    "format": "rtinfer-action-spec",
    "version": 1,
    "names": ["x", "y"],
    "units": ["m", "m"],
    "low": [-1.0, -1.0],
    "high": [1.0, 1.0],
    "horizon": 3,
    "period_ns": 50_000_000,
    "start_ns": 50_000_000,
}
POLICIES = '''
import torch

class Chunk(torch.nn.Module):
    """state [1, 4] -> a chunk of `dim` columns (the action spec has 2)."""
    def __init__(self, dim):
        super().__init__()
        torch.manual_seed(0)
        self.dim, self.net = dim, torch.nn.Linear(4, 3 * dim)

    def forward(self, state):
        return torch.tanh(self.net(state)).view(1, 3, self.dim)

def good():
    return Chunk(2)

def three_columns():
    return Chunk(3)
'''


def rtinfer(*args, cwd):
    env = dict(os.environ, PYTHONPATH=f"{cwd}{os.pathsep}{ROOT}")
    return subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def digests(folder: Path) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("package")
    (d / "policies.py").write_text(textwrap.dedent(POLICIES))
    (d / "spec.json").write_text(json.dumps(SPEC))
    (d / "spec3.json").write_text(
        json.dumps(
            {
                **SPEC,
                "names": ["x", "y", "z"],
                "units": ["m"] * 3,
                "low": [-1.0] * 3,
                "high": [1.0] * 3,
            }
        )
    )
    np.savez(d / "obs.npz", state=np.zeros(4, np.float32))
    r = rtinfer(
        "package",
        "--module",
        "policies:good",
        "--example-obs",
        "obs.npz",
        "--action-spec",
        "spec.json",
        "--out",
        "good",
        cwd=d,
    )
    assert r.returncode == 0, r.stderr
    # the three-column module, packaged against a spec it fits: an ONNX file to refuse later
    r = rtinfer(
        "package",
        "--module",
        "policies:three_columns",
        "--example-obs",
        "obs.npz",
        "--action-spec",
        "spec3.json",
        "--out",
        "three",
        cwd=d,
    )
    assert r.returncode == 0, r.stderr
    return d


def leftovers(d: Path) -> list[str]:
    return [f.name for f in d.iterdir() if f.name.startswith(".")]


def test_a_refused_module_package_leaves_the_policy_in_out_as_it_was(work):
    before = digests(work / "good")
    r = rtinfer(
        "package",
        "--module",
        "policies:three_columns",
        "--example-obs",
        "obs.npz",
        "--action-spec",
        "spec.json",
        "--out",
        "good",
        cwd=work,
    )
    assert r.returncode == 2 and r.stdout == ""
    line = r.stderr.strip()
    assert "\n" not in line and "[1, 3, 3]" in line and "return [1, 3, 2]" in line, line
    assert "['x', 'y']" in line and str(work) not in line.replace(str(work / "good"), ""), line
    assert digests(work / "good") == before  # nothing of the user's policy was lost
    assert leftovers(work) == []
    check = rtinfer("check-model", "good", cwd=work)
    assert check.returncode == 0 and check.stdout.startswith("ok: "), check.stdout


def test_a_refused_onnx_package_leaves_out_as_it_was_or_absent(work):
    before = digests(work / "good")
    bad = work / "three" / "chunk_l0.onnx"
    r = rtinfer("package", "--onnx", bad, "--action-spec", "spec.json", "--out", "good", cwd=work)
    assert r.returncode == 2, r.stderr
    assert "[1, 3, 2]" in r.stderr and "good" in r.stderr and ".good." not in r.stderr
    assert "one column per name ['x', 'y'] in order" in r.stderr, r.stderr  # and the fix
    assert digests(work / "good") == before
    r = rtinfer("package", "--onnx", bad, "--action-spec", "spec.json", "--out", "new", cwd=work)
    assert r.returncode == 2 and not (work / "new").exists()
    assert leftovers(work) == []


def test_a_package_over_an_older_one_replaces_its_levels_and_keeps_other_files(work):
    d = work / "replaced"
    r = rtinfer(
        "package",
        "--module",
        "policies:good",
        "--module",
        "policies:good",
        "--example-obs",
        "obs.npz",
        "--action-spec",
        "spec.json",
        "--out",
        d,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    (d / "NOTES.txt").write_text("mine")
    r = rtinfer(
        "package",
        "--module",
        "policies:good",
        "--example-obs",
        "obs.npz",
        "--action-spec",
        "spec.json",
        "--out",
        d,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(f.name for f in d.iterdir()) == [
        "NOTES.txt",
        "action_spec.json",
        "card.json",
        "chunk_l0.onnx",
        "graphs.json",
        "obs_spec.json",
    ]
    assert rtinfer("check-model", d, cwd=work).returncode == 0


def test_check_model_says_the_fix_for_a_file_a_missing_manifest_and_a_corrupt_graph(work, tmp_path):
    r = rtinfer("check-model", work / "good" / "graphs.json", cwd=work)
    assert r.returncode == 1
    assert "is a file" in r.stdout and f"holds it: {work / 'good'}" in r.stdout, r.stdout
    chunk = tmp_path / "no-manifest"
    chunk.mkdir()
    for name in ("chunk_l0.onnx", "action_spec.json", "obs_spec.json"):
        (chunk / name).write_bytes((work / "good" / name).read_bytes())
    r = rtinfer("check-model", chunk, cwd=work)
    assert r.returncode == 1 and "rtinfer package" in r.stdout and "export_all" not in r.stdout, (
        r.stdout
    )
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    r = rtinfer("check-model", tokens, cwd=work)
    assert "rtinfer export" in r.stdout and "export_all" not in r.stdout, r.stdout
    shipped = tmp_path / "conveyor-v1"
    import shutil

    shutil.copytree(ROOT / "models/zoo/conveyor-v1", shipped)
    with open(shipped / "step_d2_k1.onnx", "r+b") as f:
        f.seek(100)
        f.write(b"X")
    r = rtinfer("check-model", shipped, cwd=work)
    assert (
        r.returncode == 1
        and "sha256 differs" in r.stdout
        and "restore it" in r.stdout
        and "rtinfer export" in r.stdout
    ), r.stdout
