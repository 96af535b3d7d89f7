"""Backends and model directories: factory, up-front validation, parity between backends."""

import json
import shutil

import numpy as np
import pytest
from conftest import random_obs_body

from rtinfer.inference.backends import BackendError, ModelError, get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import EarlyExitDrafter
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix


def _greedy(backend, seeds, drafter_depth=None):
    md, out = backend.model, []
    dec = Decoder(backend)
    v = md.vocab
    for seed in seeds:
        prefix = build_prefix(v, *md.obs.encode(random_obs_body(np.random.default_rng(seed))))
        backend.reset()
        logits = backend.prefill(prefix, 0).copy()
        drafter = (
            EarlyExitDrafter(drafter_depth, v.action_start, v.action_stop)
            if drafter_depth
            else None
        )
        out.append(dec.decode(logits, len(prefix), md.chunk_tokens, drafter=drafter).copy())
    return np.stack(out)


def test_unknown_backend_name_lists_the_valid_ones():
    with pytest.raises(BackendError, match="onnx.*tensorrt.*torch"):
        get_backend("tflite")


def test_model_dir_exposes_layout_and_card(tiny_model_dir):
    md = ModelDir.load(tiny_model_dir)
    assert md.prefix_len == 16 and md.chunk_tokens == 12 and md.max_ctx == 32
    # depth 1: its k=1 draft step and the exit prefill (1, 12) conftest exports
    assert md.ks(3) == [1, 4, 12, 16] and md.ks(1) == [1, 12]
    assert md.accuracy(2) == 0.8 and md.accuracy(5) is None


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (
            lambda d: (d / "obs_tokens.json").write_text("{not json"),
            "obs_tokens.json is unreadable",
        ),
        (lambda d: (d / "step_d3_k4.onnx").write_bytes(b"garbage"), "sha256 differs"),
        (
            lambda d: (d / "step_d1_k1.onnx").unlink(),
            "step_d1_k1.onnx listed in graphs.json is missing",
        ),
        (lambda d: (d / "graphs.json").unlink(), "graphs.json is missing"),
    ],
)
def test_broken_model_dir_raises_model_error_naming_the_file(
    tiny_model_dir, tmp_path, damage, match
):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    damage(d)
    with pytest.raises(ModelError, match=match):
        ModelDir.load(d)


def test_edited_tokenizer_config_fails_its_hash(tiny_model_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["high"][0] = 2.0
    (d / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ModelError, match="hash"):
        ModelDir.load(d)


def test_step_rejects_an_unexported_depth(tiny_model_dir):
    be = get_backend("onnx").load(tiny_model_dir)
    with pytest.raises(BackendError, match="depth 7"):
        be.step(np.zeros(1, np.int64), 0, 7)


def test_onnx_and_torch_eager_give_identical_tokens(tiny_model_dir):
    pytest.importorskip("torch")
    seeds = range(6)
    onnx = _greedy(get_backend("onnx").load(tiny_model_dir), seeds)
    torch_be = get_backend("torch").load(tiny_model_dir, device="cpu", threads=1)
    assert (_greedy(torch_be, seeds) == onnx).all()
    assert (_greedy(torch_be, seeds, drafter_depth=1) == onnx).all()


def test_inplace_kv_binding_matches_ping_pong(tiny_model_dir):
    seeds = range(4)
    ping = _greedy(get_backend("onnx").load(tiny_model_dir), seeds, drafter_depth=2)
    inplace = get_backend("onnx").load(tiny_model_dir, inplace_kv=True)
    assert (_greedy(inplace, seeds, drafter_depth=2) == ping).all()


def test_torch_cuda_graphs_match_eager(tiny_model_dir):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    seeds = range(4)
    eager = _greedy(
        get_backend("torch").load(tiny_model_dir, device="cuda", cuda_graphs=False), seeds
    )
    graphs = get_backend("torch").load(tiny_model_dir, device="cuda", cuda_graphs=True)
    assert (_greedy(graphs, seeds, drafter_depth=1) == eager).all()


def test_tensorrt_matches_onnx(tiny_model_dir, tmp_path):
    pytest.importorskip("tensorrt")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    seeds = range(4)
    ref = _greedy(get_backend("onnx").load(tiny_model_dir), seeds)
    trt = get_backend("tensorrt").load(tiny_model_dir, fp16=False, cache_dir=tmp_path)
    got = _greedy(trt, seeds)
    assert (got == ref).mean() > 0.9  # TF32/fused kernels may flip rare near-ties
