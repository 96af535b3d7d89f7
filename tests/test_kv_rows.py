"""KV-rows twins (models.kv_rows) and the ONNX backend's in-place cache: every twin equals its
kv_out graph to the bit, and a backend on the twins gives the same logits, the same KV and the
same tokens (plain and speculative) as one on the kv_out graphs, at every precision."""

import hashlib
import shutil

import numpy as np
import pytest
from conftest import random_obs_body

from models.kv_rows import export_kv_rows
from models.quantise import quantise
from models.share import share_weights
from rtinfer.inference.backends import BackendError, get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import EarlyExitDrafter
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix

PRECISIONS = ("fp32", "int8", "int4")


@pytest.fixture(scope="module")
def rows_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with shared weights, int8 and int4 sets and every set's kv-rows twins;
    returns (dir, sha256 of every graph listed under "graphs" before the twins, the report)."""
    d = tmp_path_factory.mktemp("rows") / "m"
    shutil.copytree(tiny_model_dir, d)
    share_weights(d)
    quantise(d, ("int8", "int4"), card=False)
    md = ModelDir.load(d)
    before = {
        g["file"]: hashlib.sha256((d / g["file"]).read_bytes()).hexdigest()
        for g in md.manifest["graphs"]
    }
    return d, before, export_kv_rows(d)


def _chunks(be, seeds, drafter_depth=None):
    md, dec, v, out = be.model, Decoder(be), be.model.vocab, []
    for seed in seeds:
        prefix = build_prefix(v, *md.obs.encode(random_obs_body(np.random.default_rng(seed))))
        be.reset()
        logits = be.prefill(prefix, 0).copy()
        d = (
            EarlyExitDrafter(drafter_depth, v.action_start, v.action_stop)
            if drafter_depth
            else None
        )
        out.append(dec.decode(logits, len(prefix), md.chunk_tokens, drafter=d).copy())
    return np.stack(out)


def test_every_graph_gets_an_exact_twin_and_the_kv_out_graphs_are_untouched(rows_dir):
    d, before, report = rows_dir
    md = ModelDir.load(d)
    assert len(md.manifest["kv_rows"]) == len(md.manifest["graphs"]) == len(report)
    assert set(report.values()) == {0.0}
    for g in md.manifest["kv_rows"]:
        assert hashlib.sha256((d / g["file"]).read_bytes()).hexdigest() == g["sha256"]
    for name, sha in before.items():
        assert hashlib.sha256((d / name).read_bytes()).hexdigest() == sha, name


@pytest.mark.parametrize("prec", PRECISIONS)
def test_rows_backend_gives_the_same_logits_kv_and_tokens(rows_dir, prec):
    d = rows_dir[0]
    full = get_backend("onnx").load(d, precision=prec, kv_rows=False)
    rows = get_backend("onnx").load(d, precision=prec)  # None: the twins, since they are there
    assert len(full._kv) == 2 and len(rows._kv) == 1 and rows._new
    prefix = build_prefix(
        full.model.vocab, *full.model.obs.encode(random_obs_body(np.random.default_rng(7)))
    )
    for be in (full, rows):
        be.reset()
    assert (full.prefill(prefix, 0) == rows.prefill(prefix, 0)).all()
    for pos, tok in enumerate([5, 9, 11], start=len(prefix)):  # steps at full depth and an exit
        for depth in (None, 1):
            assert (
                full.step(np.array([tok]), pos, depth) == rows.step(np.array([tok]), pos, depth)
            ).all()
    assert (full.kv() == rows.kv()).all()
    seeds = range(4)
    plain = _chunks(full, seeds)
    assert (_chunks(rows, seeds) == plain).all()
    assert (_chunks(rows, seeds, drafter_depth=2) == plain).all()


def test_rows_snapshot_restores_the_prefix(rows_dir):
    be = get_backend("onnx").load(rows_dir[0], kv_rows=True)
    prefix = build_prefix(
        be.model.vocab, *be.model.obs.encode(random_obs_body(np.random.default_rng(1)))
    )
    be.reset()
    ref = be.prefill(prefix, 0).copy()
    snap = be.snapshot(4)
    be.reset()
    be.restore(snap)
    assert (be.prefill(prefix[4:], 4) == ref).all()


def test_kv_rows_asked_for_where_there_are_none_is_refused(tiny_model_dir):
    with pytest.raises(BackendError, match="no complete kv_rows set.*models.kv_rows"):
        get_backend("onnx").load(tiny_model_dir, kv_rows=True)
    assert len(get_backend("onnx").load(tiny_model_dir)._kv) == 2  # None: the kv_out graphs
