"""The flow model directory (kind "flow"): package_flow writes one the loader takes, and each
kind of bad input is ONE line with the fix from the loader, from `rtinfer check-model` and
from the inference node's process (exit 2), prefix/step shape mismatches included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rtinfer.model.chunk_model import load_model
from rtinfer.model.directory import ModelError
from rtinfer.model.flow_model import FlowModelDir
from rtinfer.model.manifest import read_manifest, write_manifest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from flow_dirs import SPEC, build  # noqa: E402

from models.flow_tiny import TinyFlow, export_looped  # noqa: E402


@pytest.fixture(scope="module")
def flow_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("flow") / "policy"
    build(out)
    return out


def _check_model(d):
    r = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "check-model", str(d), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.returncode, json.loads(r.stdout)


def _node(d, tmp_path):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(d),
            "--obs",
            f"ipc://{tmp_path}/obs",
            "--actions",
            f"ipc://{tmp_path}/act",
            "--seconds",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_package_flow_writes_a_directory_the_loader_and_check_model_take(flow_dir):
    md = load_model(flow_dir)
    assert isinstance(md, FlowModelDir) and md.kind == "flow" and md.integrator == "euler"
    assert [lv["steps"] for lv in md.levels] == [10, 4, 2, 1]
    assert md.action == SPEC and md.obs.keys == ["state"]
    assert sorted(p.name for p in flow_dir.iterdir()) == [
        "action_spec.json",
        "card.json",
        "graphs.json",
        "obs_spec.json",
        "prefix.onnx",
        "step.onnx",
    ]
    rc, out = _check_model(flow_dir)
    assert rc == 0 and out["ok"] and out["levels"] == [10, 4, 2, 1], out


def _edit(**changes):
    def damage(d):
        m = read_manifest(d)
        for key, value in changes.items():
            value(m) if callable(value) else m.__setitem__(key, value)
        write_manifest(d, m)

    return damage


def _levels(*steps):
    return _edit(levels=[{"level": i, "steps": k, "graph": 0} for i, k in enumerate(steps)])


def _corrupt(d):
    with open(d / "prefix.onnx", "r+b") as f:
        f.seek(50)
        f.write(b"X")


BAD = {
    "missing step graph": (
        lambda d: (d / "step.onnx").unlink(),
        "step.onnx (steps[0] in graphs.json) is missing",
    ),
    "zero steps": (_levels(10, 0), "level 1 has steps 0; give a whole number of steps >= 1"),
    "non-int steps": (_levels(10, 2.5), "level 1 has steps 2.5"),
    "not cheaper": (
        _levels(4, 10),
        "level 1 runs 10 steps, level 0 4: each level must run fewer steps",
    ),
    "corrupt graph": (_corrupt, "prefix.onnx: sha256 differs from graphs.json"),
    "malformed sha256": (
        _edit(prefix=lambda m: m["prefix"].update(sha256="abc")),
        "prefix has no valid sha256",
    ),
    "ddim without alphas": (
        _edit(integrator="ddim"),
        'integrator "ddim" needs ddim.alphas_cumprod',
    ),
    "affine narrower than D": (
        _edit(action_affine={"scale": [1.0], "offset": [0.0, 0.0]}),
        "action_affine.scale has shape [1]; give finite numbers",
    ),
    "affine not the graph's": (
        _edit(action_affine={"scale": [1.0, 1.0, 1.0], "offset": [0.0, 0.0]}),
        "action_affine.scale has shape [3] but the step graphs' x_t "
        "is [1, 8, 2]; give [2] or [8, 2]",
    ),
    "zero noise not allowed": (_edit(noise="zero"), 'noise "zero" but zero_noise_ok is false'),
}


@pytest.mark.parametrize("case", list(BAD))
def test_each_bad_input_is_one_line_with_the_fix_from_loader_check_model_and_node(
    flow_dir, tmp_path, case
):
    damage, says = BAD[case]
    d = tmp_path / "p"
    shutil.copytree(flow_dir, d)
    damage(d)
    rc, out = _check_model(d)
    assert rc == 1 and len(out["problems"]) == 1 and says in out["problems"][0], out
    assert "\n" not in out["problems"][0]
    r = _node(d, tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _swap_step(d, model: TinyFlow, tmp_path):
    """d's step graph replaced by `model`'s (the manifest's sha256 updated)."""
    import hashlib

    _, step = export_looped(model, tmp_path / "other")
    shutil.copyfile(step, d / "step.onnx")
    m = read_manifest(d)
    m["steps"][0]["sha256"] = hashlib.sha256((d / "step.onnx").read_bytes()).hexdigest()
    write_manifest(d, m)


@pytest.mark.parametrize(
    "other, says",
    [
        (
            TinyFlow(embed=16),
            "input 'cond' is tensor(float) [1, 16] but the prefix's output is "
            "tensor(float) [1, 32]; export prefix and step graphs from the same",
        ),
        (
            TinyFlow(horizon=4),
            "input 'x_t' is tensor(float) [1, 4, 2]; the contract is float32 "
            "[1, H_m, D_m] with H_m >= 6",
        ),
    ],
)
def test_a_step_graph_that_disagrees_with_the_prefix_or_the_spec_is_refused(
    flow_dir, tmp_path, other, says
):
    from models.chunk_package import PackageError
    from models.flow_package import package_flow

    d = tmp_path / "p"
    shutil.copytree(flow_dir, d)
    _swap_step(d, other, tmp_path)
    assert isinstance(load_model(d), FlowModelDir)  # JSON and hashes fine: the graphs are not
    rc, out = _check_model(d)
    assert rc == 1 and len(out["problems"]) == 1 and says in out["problems"][0], out
    r = _node(d, tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    with pytest.raises(PackageError, match=r"input .(cond|x_t). is"):
        package_flow(tmp_path / "refused", d / "prefix.onnx", [d / "step.onnx"], [2, 1], SPEC)
    assert not (tmp_path / "refused").exists()


def test_the_loader_raises_one_model_error_per_bad_input(flow_dir, tmp_path):
    for case, (damage, says) in BAD.items():
        if case in ("affine not the graph's",):  # the graphs' shape: checked when opened
            continue
        d = tmp_path / case.replace(" ", "_").replace("'", "")
        shutil.copytree(flow_dir, d)
        damage(d)
        with pytest.raises(ModelError, match=None) as e:
            load_model(d)
        assert says in str(e.value) and "\n" not in str(e.value), (case, str(e.value))
