"""Shared-k graphs (models.shared_k): one ONNX Runtime session per depth runs every k; the
graphs agree with the static ones, speculative decoding on them stays token-identical to plain
greedy, verifies run at their exact width, and a missing or corrupt one is one clear error."""

import hashlib
import shutil

import numpy as np
import pytest
from conftest import random_obs_body

from models.quantise import quantise
from models.share import share_weights
from models.shared_k import TOLERANCE, check_shared, export_shared_k
from rtinfer.bench.decode import SHIPPED_PLAN_DRAFTER, prefix_stream
from rtinfer.inference.backends import BackendError, get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter
from rtinfer.inference.plan_drafter import PlanDrafter, PlanMLP
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix
from rtinfer.model.zoo import zoo_model


@pytest.fixture(scope="module")
def shared_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with shared weights, an int8 set and shared-k graphs; returns (dir,
    sha256 of every graph listed under "graphs" before the export, the report)."""
    d = tmp_path_factory.mktemp("shared") / "m"
    shutil.copytree(tiny_model_dir, d)
    share_weights(d)
    quantise(d, ("int8",), card=False)
    md = ModelDir.load(d)
    before = {
        g["file"]: hashlib.sha256((d / g["file"]).read_bytes()).hexdigest()
        for g in md.manifest["graphs"]
    }
    weights = sorted(p.name for p in d.rglob("*.bin"))
    return d, before, export_shared_k(d), weights


def _sessions(be) -> int:
    return len({id(s) for s in be._sessions.values()})


def test_one_graph_per_depth_with_several_k_and_the_static_graphs_untouched(shared_dir):
    d, before, report, weights = shared_dir
    md = ModelDir.load(d)
    entries = md.manifest["shared_k"]
    for dtype in ("float32", "int8"):
        depths = {int(g["depth"]) for g in md.manifest["graphs"]}
        several = {dep for dep in depths if len(md.ks(dep, dtype)) > 1}
        mine = [e for e in entries if e["dtype"] == dtype]
        assert {e["depth"] for e in mine} == several
        for e in mine:
            assert e["ks"] == md.ks(e["depth"], dtype)
            assert hashlib.sha256((d / e["file"]).read_bytes()).hexdigest() == e["sha256"]
    assert len(report) == len(entries) and max(report.values()) <= TOLERANCE
    for name, sha in before.items():
        assert hashlib.sha256((d / name).read_bytes()).hexdigest() == sha, name
    assert sorted(p.name for p in d.rglob("*.bin")) == weights  # no second copy of the weights


def test_check_shared_tells_another_graph_apart(shared_dir):
    """The check that guards the export can fail: a depth-1 graph is not the depth-2 one."""
    d = shared_dir[0]
    md = ModelDir.load(d)
    top = md.n_layer
    other = next(
        e for e in md.manifest["shared_k"] if e["depth"] != top and e["dtype"] == "float32"
    )
    k = md.ks(top)[-1]
    diff, same = check_shared(d / other["file"], md.graph_path("float32", top, k), k)
    assert diff > TOLERANCE or not same


@pytest.mark.parametrize("prec", ["fp32", "int8"])
def test_backend_runs_every_k_of_a_depth_in_one_session(shared_dir, prec):
    d = shared_dir[0]
    static = get_backend("onnx").load(d, precision=prec, shared_k=False)
    shared = get_backend("onnx").load(d, precision=prec)  # None: the shared graphs, listed
    top = static.n_layer
    assert static.free_widths == frozenset()
    assert top in shared.free_widths
    assert _sessions(shared) < _sessions(static)
    assert shared._ks[top] == list(range(1, static._ks[top][-1] + 1))
    prefix = build_prefix(
        static.model.vocab, *static.model.obs.encode(random_obs_body(np.random.default_rng(3)))
    )
    for be in (static, shared):
        be.reset()
    a, b = static.prefill(prefix, 0).copy(), shared.prefill(prefix, 0)
    assert np.abs(a - b).max() <= TOLERANCE * max(1.0, np.abs(a).max())
    assert a.argmax() == b.argmax()
    for be in (static, shared):  # same chunk, plain greedy
        be.reset()
    chunks = []
    for be in (static, shared):
        logits = be.prefill(prefix, 0).copy()
        chunks.append(Decoder(be).decode(logits, len(prefix), be.model.chunk_tokens).copy())
    assert (chunks[0] == chunks[1]).all()


def test_shared_k_true_without_graphs_and_a_corrupt_graph_are_one_clear_error(
    shared_dir, tiny_model_dir, tmp_path
):
    with pytest.raises(BackendError, match="no shared_k graph.*models.shared_k"):
        get_backend("onnx").load(tiny_model_dir, shared_k=True)
    d = tmp_path / "m"
    shutil.copytree(shared_dir[0], d)
    entry = ModelDir.load(d).manifest["shared_k"][0]
    f = d / entry["file"]
    f.write_bytes(f.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(BackendError, match="sha256 differs.*re-export"):
        get_backend("onnx").load(d, precision={"float32": "fp32"}.get(entry["dtype"], "int8"))
    f.unlink()
    with pytest.raises(BackendError, match="missing.*re-export"):
        get_backend("onnx").load(d, precision={"float32": "fp32"}.get(entry["dtype"], "int8"))


def test_shipped_policy_verifies_at_exact_width_and_stays_token_identical():
    """conveyor-v1 ships shared graphs: every verify runs g + 1 tokens (no padding to the
    k = 8 graph), and the plan drafter's chunks equal plain greedy's, on the recorded stream;
    on the static graphs every verify is padded to 8."""
    model = zoo_model("conveyor-v1")
    for shared_k, padded in ((None, False), (False, True)):
        be = get_backend("onnx").load(model, shared_k=shared_k)
        md, v = be.model, be.model.vocab
        h, dim = md.tokenizer.horizon, md.tokenizer.dim
        drafter = PlanDrafter(ChunkReuseDrafter(h, dim), PlanMLP.load(SHIPPED_PLAN_DRAFTER), v)
        widths = []
        run = be._run

        def spy(depth, k, start_pos, run=run, widths=widths):
            widths.append((depth, k))
            return run(depth, k, start_pos)

        plain, spec, prev = Decoder(be), Decoder(be), None
        for prefix in prefix_stream(md, 20, 0):
            be.reset()
            ref = plain.decode(be.prefill(prefix, 0).copy(), len(prefix), md.chunk_tokens).copy()
            be.reset()
            logits = be.prefill(prefix, 0).copy()
            if prev is None:
                drafter.reuse.clear()
            else:
                drafter.reuse.set_previous(prev, 0, md.tokenizer.period_ns, md.tokenizer.period_ns)
            drafter.start(prefix)
            be._run = spy
            got = spec.decode(logits, len(prefix), md.chunk_tokens, drafter=drafter).copy()
            be._run = run
            assert (got == ref).all()
            prev = got
        verify_widths = {k for depth, k in widths if depth == be.n_layer and k > 1}
        if padded:
            assert verify_widths == {8}
        else:
            assert max(verify_widths) == 8 and min(verify_widths) < 8


@pytest.mark.parametrize("shared", [True, False])
def test_rtinfer_export_writes_shared_graphs_unless_told_not_to(tiny_model_dir, tmp_path, shared):
    """`rtinfer export` (models.package) lists a shared graph per depth with several k, and
    the backend runs them; --no-shared-k writes the static graphs only."""
    import json

    from models import checkpoint
    from models.package import package

    ck = checkpoint.load(tiny_model_dir / "policy")
    meta = {
        "tokenizer_config": json.loads((tiny_model_dir / "tokenizer.json").read_text()),
        "obs_tokens_spec": json.loads((tiny_model_dir / "obs_tokens.json").read_text()),
    }
    src = checkpoint.save(tmp_path / "ck" / "policy", ck.model, ck.vocab, meta)
    out = tmp_path / "pkg"
    card = package(src.with_suffix(""), out, fp16=False, shared_k=shared)
    listed = ModelDir.load(out).manifest.get("shared_k", [])
    be = get_backend("onnx").load(out)
    if shared:
        assert listed and set(card["shared_k"]) == {e["file"] for e in listed}
        assert be.n_layer in be.free_widths
    else:
        assert not listed and "shared_k" not in card and be.free_widths == frozenset()
