"""Bad models and configs fail with a clear ModelError (a BackendError is one too) before the loop starts.

Each case corrupts a copy of the tiny exported model (tests/conftest.py: tiny_model_dir)
and builds a real InferenceNode from it; the CLI case checks that the node process exits
non-zero with the reason and never reports ready.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rtinfer.inference.backends import ModelError
from tests.faults.common import PY, ROOT


def _json_edit(path: Path, fn) -> None:
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


def _rehash(m: Path) -> None:
    """Make graphs.json's sha256 entries match the files (to get past the hash check)."""

    def fix(d):
        for g in d["graphs"] if isinstance(d["graphs"], list) else d["graphs"].values():
            if g.get("sha256"):
                g["sha256"] = hashlib.sha256((m / g["file"]).read_bytes()).hexdigest()

    _json_edit(m / "graphs.json", fix)


def _missing_graph(m):
    (m / "step_d3_k4.onnx").unlink()


def _truncated_graph(m):
    f = m / "step_d3_k1.onnx"
    f.write_bytes(f.read_bytes()[:200])


def _garbage_graph_rehashed(m):
    (m / "step_d3_k1.onnx").write_bytes(b"not an onnx model at all" * 10)
    _rehash(m)


def _swapped_shapes_rehashed(m):
    a, b = m / "step_d3_k4.onnx", m / "step_d3_k12.onnx"
    tmp = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(tmp)
    _rehash(m)


def _tokenizer_mismatch(m):
    _json_edit(m / "tokenizer.json", lambda d: d.update(bins=d["bins"] * 2))


def _corrupt_json(m):
    (m / "graphs.json").write_text("{not json")


def _missing_tokenizer(m):
    (m / "tokenizer.json").unlink()


def _obs_spec_too_big(m):
    _json_edit(m / "obs_tokens.json", lambda d: d.update(bins=10_000))


CASES = {
    "missing_graph": _missing_graph,
    "truncated_graph": _truncated_graph,
    "garbage_graph_rehashed": _garbage_graph_rehashed,
    "swapped_shapes_rehashed": _swapped_shapes_rehashed,
    "tokenizer_mismatch": _tokenizer_mismatch,
    "corrupt_json": _corrupt_json,
    "missing_tokenizer": _missing_tokenizer,
    "obs_spec_too_big": _obs_spec_too_big,
}


def _node(model, backend="onnx"):
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    d = tempfile.mkdtemp(prefix="rtf-bad-")
    return InferenceNode(
        model, f"ipc://{d}/obs", f"ipc://{d}/act", cfg=InferenceNodeConfig(backend=backend)
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_model_is_refused_with_a_model_error_before_the_loop(tiny_model_dir, tmp_path, case):
    m = tmp_path / "model"
    shutil.copytree(tiny_model_dir, m)
    CASES[case](m)
    with pytest.raises(ModelError) as e:
        node = _node(m)
        node.close()
    print(f"{case}: {e.value}")
    assert str(m) in str(e.value) or "model" in str(e.value)


def test_unknown_backend_and_missing_directory_are_refused(tiny_model_dir, tmp_path):
    with pytest.raises(ModelError, match="unknown backend"):
        _node(tiny_model_dir, backend="tpu9000")
    with pytest.raises(ModelError, match="does not exist"):
        _node(tmp_path / "nowhere")


def test_node_process_exits_non_zero_with_the_reason_and_never_gets_ready(tiny_model_dir, tmp_path):
    m = tmp_path / "model"
    shutil.copytree(tiny_model_dir, m)
    _truncated_graph(m)
    r = subprocess.run(
        [
            PY,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(m),
            "--obs",
            f"ipc://{tmp_path}/o",
            "--actions",
            f"ipc://{tmp_path}/a",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    # the reason, as one error line naming the file (no traceback): "infer: error: ... corrupt"
    assert "error:" in r.stderr and "corrupt" in r.stderr and str(m) in r.stderr
    assert "Traceback" not in r.stderr
    assert "ready" not in r.stdout
