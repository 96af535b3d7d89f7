"""`rtinfer package` without --obs-spec, for a graph whose input is uint8 [96, 96, 3]: it is
packaged as asked (a plain array), and both the packager and `rtinfer check-model` say that
it looks like a camera image and name --obs-spec; a float input says nothing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rtinfer.model.action_spec import ActionSpec

ROOT = Path(__file__).resolve().parents[1]
ACTION = ActionSpec(
    ("x", "y"),
    ("m", "m"),
    (-1.0, -1.0),
    (1.0, 1.0),
    horizon=2,
    period_ns=50_000_000,
    start_ns=50_000_000,
)


def graph(path: Path, dtype, shape: list[int]) -> None:
    """A graph of one input `overhead` [1, *shape]: every action is its mean / 255."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [
        h.make_node("Cast", ["overhead"], ["f"], to=T.FLOAT),
        h.make_node("Reshape", ["f", "flat"], ["r"]),
        h.make_node("ReduceMean", ["r"], ["m"], axes=[1], keepdims=1),
        h.make_node("Mul", ["m", "inv255"], ["s"]),
        h.make_node("Reshape", ["s", "one3"], ["s3"]),
        h.make_node("Expand", ["s3", "out_shape"], ["actions"]),
    ]
    consts = [
        h.make_tensor("flat", T.INT64, [2], [1, -1]),
        h.make_tensor("one3", T.INT64, [3], [1, 1, 1]),
        h.make_tensor("out_shape", T.INT64, [3], [1, 2, 2]),
        h.make_tensor("inv255", T.FLOAT, [1], [1 / 255]),
    ]
    g = h.make_graph(
        nodes,
        "image_like",
        [h.make_tensor_value_info("overhead", dtype, [1, *shape])],
        [h.make_tensor_value_info("actions", T.FLOAT, [1, 2, 2])],
        consts,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("image", [True, False])
def test_an_image_like_input_packaged_as_an_array_gets_a_hint_naming_obs_spec(tmp_path, image):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto as T

    graph(tmp_path / "g.onnx", T.UINT8 if image else T.FLOAT, [96, 96, 3])
    ACTION.save(tmp_path / "action_spec.json")
    p = cli(
        "package",
        "--onnx",
        "g.onnx",
        "--action-spec",
        "action_spec.json",
        "--out",
        "m",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    spec = json.loads((tmp_path / "m" / "obs_spec.json").read_text())
    assert spec["inputs"][0] == {
        "key": "overhead",
        "dtype": "uint8" if image else "float32",
        "shape": [96, 96, 3],
    }  # packaged as asked
    check = cli("check-model", "m", cwd=tmp_path)
    assert check.returncode == 0 and check.stdout.startswith("ok"), check.stdout
    hints = [ln for ln in p.stderr.splitlines() + check.stdout.splitlines() if "hint" in ln]
    if not image:
        assert hints == []
        return
    assert len(hints) == 2, p.stderr + check.stdout
    for line in hints:
        assert "'overhead'" in line and "uint8 [96, 96, 3]" in line and "image" in line
        assert "--obs-spec" in line and '"kind": "image"' in line, line
