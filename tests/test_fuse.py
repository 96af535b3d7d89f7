"""models.fuse: ONNX Runtime's transformer fusions on a model directory's step graphs. The fused
graphs have fewer nodes, keep their weights where they were, and give the same greedy tokens
as the unfused ones, plain and speculative, fp32 and int4, kv_out graphs and KV-rows twins."""

import shutil

import numpy as np
import onnx
import pytest
from conftest import random_obs_body

pytest.importorskip("onnxruntime.transformers")


@pytest.fixture(scope="module")
def pair(tiny_model_dir, tmp_path_factory):
    """(unfused, fused) copies of the tiny model with int4 graphs and KV-rows twins."""
    from models.fuse import fuse_dir
    from models.kv_rows import export_kv_rows
    from models.quantise import quantise

    plain = tmp_path_factory.mktemp("unfused") / "m"
    shutil.copytree(tiny_model_dir, plain)
    quantise(plain, ("int4",), card=False)
    export_kv_rows(plain)
    fused = plain.with_name("fused")
    shutil.copytree(plain, fused)
    report = fuse_dir(fused, ("float32", "int4"))
    return plain, fused, report


def _prefixes(md, n=12):
    from rtinfer.model.sequence import build_prefix

    out = []
    for seed in range(n):
        instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(seed)))
        out.append(build_prefix(md.vocab, instr, obs))
    return out


def test_fusing_cuts_nodes_and_leaves_the_weights_alone(pair):
    from rtinfer.model.directory import ModelDir

    plain, fused, report = pair
    assert set(report) == {"float32", "int4"}
    rows = [f for f in report["int4"] if f.endswith("_rows.onnx")]
    assert rows and len(report["int4"]) > len(rows)  # kv_out graphs and twins alike
    for files in report.values():
        for f, r in files.items():
            assert r["nodes_after"] < r["nodes_before"]
            assert r["ops_after"].get("SkipLayerNormalization", 0) >= 2
            ops = {
                n.op_type for n in onnx.load(str(fused / f), load_external_data=False).graph.node
            }
            assert "SkipLayerNormalization" in ops
    for w in ("weights.bin", "int4/weights.bin"):
        assert (fused / w).read_bytes() == (plain / w).read_bytes()
    md = ModelDir.load(fused)  # the manifest's sha256s match the rewritten files
    assert set(md.manifest["fused"]) == {"float32", "int4"}


def test_fusing_twice_changes_nothing(pair):
    from models.fuse import fuse_dir

    _, fused, _ = pair
    before = (fused / "graphs.json").read_bytes()
    assert fuse_dir(fused, ("float32", "int4")) == {}
    assert (fused / "graphs.json").read_bytes() == before


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_fused_graphs_give_the_same_greedy_tokens(pair, precision):
    from models.quantise import greedy_chunks
    from rtinfer.inference.backends import get_backend

    plain, fused, _ = pair
    ref = get_backend("onnx").load(plain, precision=precision)
    be = get_backend("onnx").load(fused, precision=precision)
    prefixes = _prefixes(be.model)
    want = greedy_chunks(ref, prefixes)
    got = greedy_chunks(be, prefixes)
    assert (got == want).all()
    for drafter in ("self", "chunk"):  # speculation on fused graphs stays lossless
        assert (greedy_chunks(be, prefixes, drafter) == got).all()


@pytest.mark.parametrize("kv_rows", [False, True])
def test_both_kv_forms_run_fused(pair, kv_rows):
    from models.quantise import greedy_chunks
    from rtinfer.inference.backends import get_backend

    plain, fused, _ = pair
    be = get_backend("onnx").load(fused, precision="int4", kv_rows=kv_rows)
    ref = get_backend("onnx").load(plain, precision="int4", kv_rows=kv_rows)
    prefixes = _prefixes(be.model, 6)
    assert (greedy_chunks(be, prefixes) == greedy_chunks(ref, prefixes)).all()


def test_an_unknown_fusion_is_refused_with_the_choices():
    from models.fuse import fuse_model

    with pytest.raises(ValueError, match="choose from"):
        fuse_model(onnx.ModelProto(), 2, 32, ("flash",))
