"""Shared weights: one weights.bin per model directory, same logits as the self-contained graphs."""

import shutil

import numpy as np

from models.share import WEIGHTS, share_weights
from rtinfer.inference.backends import get_backend
from rtinfer.model.directory import ModelDir


def _logits(path, tokens):
    be = get_backend("onnx").load(ModelDir.load(path), threads=1)
    return np.array(be.prefill(tokens, 0))


def test_shared_weights_give_identical_logits_and_a_smaller_folder(tiny_model_dir, tmp_path):
    shared = tmp_path / "shared"
    shutil.copytree(tiny_model_dir, shared)
    sizes = share_weights(shared)
    assert (shared / WEIGHTS).exists()
    assert sizes["bytes_after"] < sizes["bytes_before"] / 2
    tokens = np.arange(1, 17, dtype=np.int64)  # a whole-prefix graph's length
    np.testing.assert_array_equal(_logits(shared, tokens), _logits(tiny_model_dir, tokens))


def test_a_truncated_weights_file_is_a_clear_error_before_the_loop(tiny_model_dir, tmp_path):
    import pytest

    from rtinfer.model.directory import ModelError

    shared = tmp_path / "shared"
    shutil.copytree(tiny_model_dir, shared)
    share_weights(shared)
    (shared / WEIGHTS).write_bytes((shared / WEIGHTS).read_bytes()[:100])
    with pytest.raises(ModelError):  # the hash check, before any backend
        get_backend("onnx").load(ModelDir.load(shared), threads=1)
