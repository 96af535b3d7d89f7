"""GPU paths: torch on CUDA (CUDA graphs per k, 2:4 semi-structured weights) and TensorRT
engines (build, cache, CUDA-graph launch), each against ONNX Runtime CPU tokens.
Skipped, with the reason, where torch has no CUDA device or tensorrt is not installed."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import K_VERIFY, TINY_SPEC, random_obs_body

from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import EarlyExitDrafter
from rtinfer.model.sequence import build_prefix

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"
)
SEEDS = range(4)


def _greedy(backend, seeds=SEEDS, drafter_depth=None):
    md, out = backend.model, []
    dec, v = Decoder(backend), backend.model.vocab
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


@pytest.fixture(scope="module")
def onnx_tokens(tiny_model_dir):
    pytest.importorskip("onnxruntime")
    return _greedy(get_backend("onnx").load(tiny_model_dir))


@pytest.fixture(scope="module")
def pruned_model_dir(tmp_path_factory):
    """A 2:4-pruned model wide enough for the semi-structured kernels (n_embd 128), with
    fp32 and fp16 graphs, same token layout as the tiny model."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from models import checkpoint
    from models.config import PolicyConfig, Vocab
    from models.export import export_all
    from models.policy import Policy
    from models.sparsity import fold, prepare
    from rtinfer.model.action_tokens import TokenizerConfig

    torch.manual_seed(1)
    vocab = Vocab(n_instr=3, n_obs_bins=16, n_action_bins=32)
    cfg = PolicyConfig(
        vocab_size=vocab.size, n_layer=2, n_head=4, n_embd=128, max_ctx=32, exits=(1,)
    )
    model = Policy(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(4.0)
    prepare(model)
    fold(model)
    out = tmp_path_factory.mktemp("pruned_model")
    export_all(model, cfg, out, k_verify=K_VERIFY, prefix_len=[16], vocab=vocab, fp16=True)
    TokenizerConfig(
        low=(-1.0, -1.0, 0.0, 0.0),
        high=(1.0, 1.0, 1.0, 1.0),
        bins=32,
        horizon=3,
        period_ns=50_000_000,
    ).save(out / "tokenizer.json")
    (out / "obs_tokens.json").write_text(json.dumps(TINY_SPEC))
    checkpoint.save(out / "policy", model, vocab)
    return out


# --- torch on CUDA ---------------------------------------------------------------------------
def test_torch_cuda_graphs_give_onnx_cpu_tokens(tiny_model_dir, onnx_tokens):
    be = get_backend("torch").load(tiny_model_dir, device="cuda", cuda_graphs=True)
    assert be.counters["graph_fallbacks"] == 0 and len(be._graphs) == sum(map(len, be._ks.values()))
    assert (_greedy(be) == onnx_tokens).mean() > 0.9  # TF32/fused kernels may flip rare near-ties
    assert (_greedy(be, drafter_depth=1) == _greedy(be)).all()  # speculative stays lossless


def test_torch_cuda_graph_replay_equals_eager_exactly(tiny_model_dir):
    eager = get_backend("torch").load(tiny_model_dir, device="cuda", cuda_graphs=False)
    graphs = get_backend("torch").load(tiny_model_dir, device="cuda", cuda_graphs=True)
    assert (_greedy(graphs) == _greedy(eager)).all()


def test_torch_sparse24_matches_dense_fp16(pruned_model_dir):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("2:4 semi-structured kernels need compute capability >= 8.0")
    dense = get_backend("torch").load(pruned_model_dir, device="cuda", dtype="float16")
    sparse = get_backend("torch").load(
        pruned_model_dir, device="cuda", dtype="float16", sparse24=True
    )
    assert sparse.counters["sparse_layers"] == 8
    assert (_greedy(sparse) == _greedy(dense)).mean() > 0.9  # fp16 kernels differ in rounding


def test_torch_sparse24_refuses_weights_that_are_not_24(tiny_model_dir):
    from rtinfer.inference.backends import BackendError

    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("2:4 semi-structured kernels need compute capability >= 8.0")
    with pytest.raises(BackendError, match="not 2:4"):
        get_backend("torch").load(tiny_model_dir, device="cuda", dtype="float16", sparse24=True)


# --- TensorRT --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trt_cache(tmp_path_factory):
    pytest.importorskip("tensorrt", reason="tensorrt is not installed")
    return tmp_path_factory.mktemp("trt_cache")


def test_tensorrt_graph_launch_gives_onnx_cpu_tokens(tiny_model_dir, onnx_tokens, trt_cache):
    be = get_backend("tensorrt").load(
        tiny_model_dir, fp16=False, sparse=False, cache_dir=trt_cache, opt_level=1
    )
    got = _greedy(be)
    c = be.counters
    assert c["graph_replays"] + c["plain_launches"] == sum(be.forwards.values())
    assert c["graph_fallbacks"] == 0, f"CUDA graph capture failed: {c}"
    assert (got == onnx_tokens).mean() > 0.9
    plain = get_backend("tensorrt").load(
        tiny_model_dir,
        fp16=False,
        sparse=False,
        cache_dir=trt_cache,
        opt_level=1,
        cuda_graphs=False,
    )
    assert (_greedy(plain) == got).all() and plain.counters["graph_replays"] == 0


def test_tensorrt_engines_are_cached_with_timing_cache_and_build_log(tiny_model_dir, trt_cache):
    from rtinfer.inference.backends.tensorrt_build import EngineBuilder
    from rtinfer.model.directory import ModelDir

    md = ModelDir.load(tiny_model_dir)
    builder = EngineBuilder(trt_cache, opt_level=1)
    first = builder.build_model(md, fp16=False, sparse=False)
    again = EngineBuilder(trt_cache, opt_level=1).build_model(md, fp16=False, sparse=False)
    assert all(g["cached"] for g in again["graphs"].values())
    assert len(list(trt_cache.glob("timing-*.cache"))) == 1
    for g in first["graphs"].values():
        assert Path(g["log"]).exists() and Path(g["engine"]).exists()
        assert g["inspector"]["layers"] > 0, g["inspector"]


def test_tensorrt_fp16_sparse_engine_reports_layers_and_tracks_onnx(pruned_model_dir, trt_cache):
    ref = _greedy(get_backend("onnx").load(pruned_model_dir))
    be = get_backend("tensorrt").load(
        pruned_model_dir, fp16=True, sparse=True, cache_dir=trt_cache, opt_level=1
    )
    rep = be.build_report
    assert rep["plan"]["onnx_dtype"] == "float16" and "SPARSE_WEIGHTS" in rep["plan"]["flags"]
    assert all(g["inspector"]["layers"] > 0 for g in rep["graphs"].values())
    assert (_greedy(be) == ref).mean() > 0.8  # fp16 engine vs fp32 CPU reference


# --- TensorRT INT8 / FP8 (explicit quantization from the Q/DQ graphs of models.qdq) ----------
@pytest.fixture(scope="module")
def qdq_dir(tiny_model_dir, tmp_path_factory):
    from test_engine import make_qdq_dir  # the tiny model with its qdq-int8 and qdq-fp8 sets

    return make_qdq_dir(tiny_model_dir, tmp_path_factory)


def test_tensorrt_int8_engine_builds_from_the_qdq_graphs_and_tracks_onnx(qdq_dir, trt_cache):
    d, _ = qdq_dir
    ref = _greedy(get_backend("onnx").load(d))
    be = get_backend("tensorrt").load(
        d, precision="int8", sparse=False, cache_dir=trt_cache, opt_level=1
    )
    rep = be.build_report
    assert rep["plan"]["onnx_dtype"] == "qdq-int8" and rep["plan"]["precision"] == "int8"
    assert rep["plan"]["strongly_typed"] and rep["plan"]["flags"] == []
    assert be.counters["graph_fallbacks"] == 0
    assert (_greedy(be) == ref).mean() > 0.8  # int8 engine vs fp32 CPU reference
    again = get_backend("tensorrt").load(
        d, precision="int8", sparse=False, cache_dir=trt_cache, opt_level=1
    )
    assert all(g["cached"] for g in again.build_report["graphs"].values())


def test_tensorrt_fp8_is_built_on_sm89_and_later_and_refused_below(qdq_dir, trt_cache):
    from rtinfer.inference.backends import BackendError

    d, _ = qdq_dir
    cc = torch.cuda.get_device_capability()
    if cc < (8, 9):
        with pytest.raises(BackendError, match="FP8 needs compute capability 8.9"):
            get_backend("tensorrt").load(d, precision="fp8", cache_dir=trt_cache)
        return
    ref = _greedy(get_backend("onnx").load(d))
    be = get_backend("tensorrt").load(
        d, precision="fp8", sparse=False, cache_dir=trt_cache, opt_level=1
    )
    assert be.build_report["plan"]["onnx_dtype"] == "qdq-fp8"
    assert (_greedy(be) == ref).mean() > 0.8
