"""One copy of each blob: the checkpoint is the graphs' weights file, shared blobs live once in
models/zoo/_blobs/<sha256>/, and the shipped tree stays under 100 MB (models/zoo/README.md)."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo"
BLOB_BYTES = 64 * 1024  # smaller files (tokenizers, specs, streams) may repeat


def _files():
    return [p for p in ZOO.rglob("*") if p.is_file() and not p.is_symlink()]


def test_the_shipped_zoo_holds_each_blob_once_and_under_100_mb():
    seen = {}
    for p in _files():
        if p.stat().st_size >= BLOB_BYTES:
            seen.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), []).append(p)
    twice = [[str(p.relative_to(ZOO)) for p in ps] for ps in seen.values() if len(ps) > 1]
    assert not twice, f"blobs shipped twice (share them: python -m models.checkpoint_blob): {twice}"
    assert sum(p.stat().st_size for p in _files()) <= 100e6


def test_no_shipped_model_keeps_its_fp32_weights_beside_its_checkpoint():
    for m in ZOO.glob("*/graphs.json"):
        d = m.parent
        if any(d.glob("*.safetensors")):
            assert not (d / "weights.bin").exists(), f"{d.name}: merge it (models.checkpoint_blob)"


@pytest.fixture()
def merged(tiny_model_dir, tmp_path):
    from models.checkpoint_blob import merge
    from models.share import share_weights

    out = tmp_path / "zoo" / "merged"
    shutil.copytree(tiny_model_dir, out)
    share_weights(out)  # weights.bin, as the zoo's models are exported
    merge(out)
    return out


def _logits(path):
    from rtinfer.inference.backends import get_backend
    from rtinfer.model.directory import ModelDir

    be = get_backend("onnx").load(ModelDir.load(path), threads=1)
    return np.array(be.prefill(np.arange(1, 17, dtype=np.int64), 0))


def test_a_merged_directory_gives_the_same_logits_and_the_same_checkpoint(tiny_model_dir, merged):
    import torch

    from models import checkpoint
    from models.share import WEIGHTS

    assert not (merged / WEIGHTS).exists()
    assert "policy.safetensors" in json.loads((merged / "graphs.json").read_text())["weights"]
    np.testing.assert_array_equal(_logits(merged), _logits(tiny_model_dir))
    a = checkpoint.load(tiny_model_dir / "policy").model.state_dict()
    b = checkpoint.load(merged / "policy").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_two_folders_share_one_blob_and_the_loader_checks_its_hash(tiny_model_dir, merged):
    from models.checkpoint_blob import share
    from rtinfer.model.directory import ModelDir, ModelError

    twin = merged.parent / "twin"
    shutil.copytree(merged, twin)
    blobs = share([merged, twin])
    assert blobs.parent.name == "_blobs" and (blobs / "policy.safetensors").is_file()
    assert not any(merged.glob("*.onnx")) and (merged / "policy.safetensors").is_symlink()
    np.testing.assert_array_equal(_logits(twin), _logits(tiny_model_dir))
    blob = blobs / "policy.safetensors"
    blob.write_bytes(blob.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ModelError, match="sha256 differs"):
        ModelDir.load(merged)


def test_a_manifest_path_out_of_the_folder_is_refused_in_one_line(merged):
    from rtinfer.model.directory import ModelDir, ModelError

    m = json.loads((merged / "graphs.json").read_text())
    m["graphs"][0]["file"] = "../elsewhere/" + m["graphs"][0]["file"]
    (merged / "graphs.json").write_text(json.dumps(m))
    with pytest.raises(ModelError, match=r"lies outside the model folder") as e:
        ModelDir.load(merged)
    assert "\n" not in str(e.value)


def test_no_two_shipped_graphs_embed_the_same_weights():
    """Graphs of one model keep shared tensors in one external file, not a copy each."""
    onnx = pytest.importorskip("onnx")
    seen, twice = {}, []
    for g in sorted(ZOO.rglob("*.onnx")):
        for t in onnx.load(str(g), load_external_data=False).graph.initializer:
            if t.HasField("raw_data") and len(t.raw_data) >= BLOB_BYTES:
                key = hashlib.sha256(t.raw_data).hexdigest()
                if key in seen:
                    twice.append(f"{g.relative_to(ZOO)}:{t.name} = {seen[key]}")
                seen.setdefault(key, f"{g.relative_to(ZOO)}:{t.name}")
    assert not twice, twice[:5]
