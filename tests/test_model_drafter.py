"""A separate draft model and the exit-depth cascade: speculative greedy stays token-identical
to the target's plain greedy whatever the draft proposes (a random policy, the target's first
blocks, the target itself), and the runner serves both drafters."""

import json

import numpy as np
import pytest
from conftest import K_VERIFY, random_obs_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter
from rtinfer.inference.model_drafter import CascadeDrafter, ModelDrafter
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix

N = 12  # tiny model's chunk: H=3 x D=4


@pytest.fixture(scope="module")
def random_draft_dir(tiny_model_dir, tmp_path_factory):
    """A 1-block policy with fresh weights and the target's vocab: a poor draft."""
    import torch

    from models.config import PolicyConfig
    from models.export import export_all
    from models.policy import Policy

    md = ModelDir.load(tiny_model_dir)
    torch.manual_seed(1)
    cfg = PolicyConfig(
        vocab_size=md.vocab.size, n_layer=1, n_head=2, n_embd=16, max_ctx=md.max_ctx, exits=()
    )
    out = tmp_path_factory.mktemp("random_draft")
    vocab = json.loads((tiny_model_dir / "graphs.json").read_text())["vocab"]
    from models.config import Vocab

    export_all(
        Policy(cfg).eval(),
        cfg,
        out,
        k_verify=K_VERIFY,
        prefix_len=[md.prefix_len],
        vocab=Vocab.from_dict(vocab),
        fp16=False,
    )
    for name in ("tokenizer.json", "obs_tokens.json"):
        (out / name).write_text((tiny_model_dir / name).read_text())
    return out


@pytest.fixture(scope="module")
def drafts(tiny_model_dir, random_draft_dir, tmp_path_factory):
    from rtinfer.bench.dynamic_models import truncated_draft

    truncated = truncated_draft(tiny_model_dir, tmp_path_factory.mktemp("trunc"), 2, K_VERIFY)
    return {
        name: ModelDrafter(get_backend("onnx").load(path))
        for name, path in (
            ("random", random_draft_dir),
            ("truncated", truncated),
            ("target", tiny_model_dir),
        )
    }


@pytest.fixture(scope="module")
def target(tiny_model_dir, tmp_path_factory):
    from rtinfer.bench.dynamic_models import with_graphs

    path = with_graphs(tiny_model_dir, tmp_path_factory.mktemp("exitv"), [(2, K_VERIFY)])
    return get_backend("onnx").load(path)


def _decode(be, prefix, drafter=None, **kw):
    be.reset()
    logits = be.prefill(prefix, 0).copy()
    if isinstance(drafter, ModelDrafter):
        drafter.start(prefix)
    dec = Decoder(be, **kw)
    return dec.decode(logits, len(prefix), N, drafter=drafter).copy(), dec


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), gamma=st.sampled_from([None, 1, 2]))
def test_draft_model_greedy_is_token_identical_to_plain_greedy(target, drafts, seed, gamma):
    md = target.model
    prefix = build_prefix(md.vocab, *md.obs.encode(random_obs_body(np.random.default_rng(seed))))
    plain, _ = _decode(target, prefix)
    for name, d in drafts.items():
        out, dec = _decode(target, prefix, d)
        assert (out == plain).all(), name
        if gamma is not None:
            out = dec.decode(_prefill(target, prefix, d), len(prefix), N, drafter=d, gamma=gamma)
            assert (out == plain).all(), (name, gamma)


def _prefill(be, prefix, d):
    be.reset()
    d.start(prefix)
    return be.prefill(prefix, 0).copy()


def test_a_draft_that_is_the_target_is_always_accepted(target, drafts):
    md, d = target.model, drafts["target"]
    prefix = build_prefix(md.vocab, *md.obs.encode(random_obs_body(np.random.default_rng(3))))
    before = dict(d.stats)
    _, dec = _decode(target, prefix, d)
    drafted = d.stats["drafted"] - before["drafted"]
    assert drafted > 0 and d.stats["accepted"] - before["accepted"] == drafted
    assert dec.stats.target_passes < N // 2  # vs N - 1 for plain greedy
    # in sync: the draft's KV of every position it holds as final is the target's
    n = d._valid
    assert n >= len(prefix) + N - K_VERIFY
    assert np.allclose(d.backend.kv()[..., :n, :], target.kv()[..., :n, :], atol=1e-4)


def test_draft_model_of_another_vocab_is_refused(tiny_model_dir, drafts):
    d = drafts["random"]

    class Other:
        vocab, max_ctx, path = None, d.backend.model.max_ctx, "other"

    with pytest.raises(ValueError, match="vocab differs"):
        d.check_target(Other)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), plan_seed=st.integers(0, 2**32 - 1))
def test_cascade_greedy_is_token_identical_to_plain_greedy(target, seed, plan_seed):
    md, v = target.model, target.model.vocab
    prefix = build_prefix(md.vocab, *md.obs.encode(random_obs_body(np.random.default_rng(seed))))
    plain, _ = _decode(target, prefix)
    rng = np.random.default_rng(plan_seed)
    prev = np.concatenate([rng.integers(0, 32, 4), plain[:8]])
    cascade = CascadeDrafter(ChunkReuseDrafter(3, 4), 2, v.action_start, v.action_stop, K_VERIFY)
    cascade.reuse.set_previous(prev, 0, int(rng.integers(0, 2)) * 50_000_000, 50_000_000)
    out, dec = _decode(target, prefix, cascade)
    assert (out == plain).all()
    assert cascade.passes == dec.stats.verifies  # one exit pass per full verify


def test_runner_serves_the_draft_model_and_the_cascade(tiny_model_dir, target, drafts, tmp_path):
    from rtinfer.inference.budget import BudgetLevel
    from rtinfer.inference.runner import DRAFTERS, TokenRunner

    assert {"model", "cascade"} <= set(DRAFTERS)
    md = target.model
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(5)))
    level = BudgetLevel(md.n_layer, K_VERIFY - 1, 3)
    draft_dir = drafts["truncated"].backend.model.path
    outs = {}
    for name, opts in (("none", {}), ("model", {"draft_model": draft_dir}), ("cascade", {})):
        r = TokenRunner(ModelDir.load(md.path), drafter=name, **opts)
        outs[name] = [r.run(instr, obs, t * 50_000_000, level)[0].copy() for t in range(3)]
    for name in ("model", "cascade"):
        assert all((a == b).all() for a, b in zip(outs[name], outs["none"])), name
    with pytest.raises(ValueError, match="needs a k=4 graph at an early exit"):
        TokenRunner(ModelDir.load(tiny_model_dir), drafter="cascade")
    with pytest.raises(ValueError, match="needs a draft model: none at"):
        TokenRunner(ModelDir.load(tiny_model_dir), drafter="model")
