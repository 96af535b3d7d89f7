"""Policy architecture: shapes, KV-cache equivalence, shared-head early exits, checkpoints."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models import checkpoint
from models.config import PolicyConfig, Vocab
from models.policy import Policy

torch.set_num_threads(2)
ATOL = 1e-5
CFG = PolicyConfig(vocab_size=61, n_layer=4, n_head=2, n_embd=32, max_ctx=32, exits=(1, 2))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Policy(CFG).eval()


def _seq(T=24, seed=1):
    return torch.randint(0, CFG.vocab_size, (2, T), generator=torch.Generator().manual_seed(seed))


def _decode(model, idx, chunks, exit_layer=None):
    kv, out, pos = model.new_kv(idx.shape[0]), [], 0
    for k in chunks:
        logits, kv = model.step(idx[:, pos : pos + k], pos, kv, exit_layer)
        out.append(logits)
        pos += k
    return torch.cat(out, 1), kv


def test_forward_and_step_shapes(model):
    idx = _seq()
    assert model(idx).shape == (2, 24, CFG.vocab_size)
    logits, kv = model.step(idx[:, :3], 0, model.new_kv(2))
    assert logits.shape == (2, 3, CFG.vocab_size)
    assert kv.shape == CFG.kv_shape(2) == (4, 2, 2, 2, 32, 16)


@torch.no_grad()
def test_one_token_steps_match_full_forward(model):
    idx = _seq()
    logits, _ = _decode(model, idx, [1] * idx.shape[1])
    torch.testing.assert_close(logits, model(idx), atol=ATOL, rtol=0)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=12))
@torch.no_grad()
def test_mixed_k_steps_match_full_forward(chunks):
    torch.manual_seed(0)
    model = Policy(CFG).eval()
    total = min(sum(chunks), CFG.max_ctx)
    chunks = [c for c in np.diff(np.minimum(np.cumsum([0] + chunks), total)) if c > 0]
    idx = _seq(total)
    logits, _ = _decode(model, idx, chunks)
    torch.testing.assert_close(logits, model(idx), atol=ATOL, rtol=0)


@torch.no_grad()
def test_exit_logits_equal_first_blocks_then_shared_head(model):
    idx = _seq()
    for depth in CFG.depths:
        x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
        for block in model.blocks[:depth]:
            x = block(x)
        expected = model.lm_head(model.ln_f(x))
        torch.testing.assert_close(model(idx, exit_layer=depth), expected, atol=ATOL, rtol=0)


@torch.no_grad()
def test_forward_all_exits_matches_forward_at_each_exit(model):
    idx = _seq()
    every = model.forward_all_exits(idx)
    assert sorted(every) == [1, 2, 4]
    for depth, logits in every.items():
        torch.testing.assert_close(logits, model(idx, exit_layer=depth), atol=ATOL, rtol=0)


@torch.no_grad()
def test_shallow_step_matches_forward_at_exit_and_leaves_deeper_kv(model):
    idx = _seq()
    logits, kv = _decode(model, idx, [5, 1, 1, 4], exit_layer=2)
    torch.testing.assert_close(logits, model(idx[:, :11], exit_layer=2), atol=ATOL, rtol=0)
    assert torch.count_nonzero(kv[2:]) == 0


@torch.no_grad()
def test_shallow_draft_then_full_verify_equals_full_depth_decoding(model):
    idx, prefix, k = _seq(), 10, 6
    _, kv = _decode(model, idx, [prefix])
    pos = prefix
    for _ in range(k):  # draft k tokens one at a time at the first exit
        _, kv = model.step(idx[:, pos : pos + 1], pos, kv, exit_layer=1)
        pos += 1
    verify, kv = model.step(idx[:, prefix : prefix + k], prefix, kv)
    full, kv_full = _decode(model, idx, [prefix, k])
    torch.testing.assert_close(verify, full[:, prefix:], atol=ATOL, rtol=0)
    torch.testing.assert_close(kv, kv_full, atol=ATOL, rtol=0)
    after, _ = model.step(idx[:, pos : pos + 3], pos, kv)
    torch.testing.assert_close(after, model(idx[:, : pos + 3])[:, pos:], atol=ATOL, rtol=0)


@torch.no_grad()
def test_step_takes_start_pos_as_tensor(model):
    idx = _seq()
    _, kv = model.step(idx[:, :4], 0, model.new_kv(2))
    a, _ = model.step(idx[:, 4:6], 4, kv)
    b, _ = model.step(idx[:, 4:6], torch.tensor([4]), kv)
    assert torch.equal(a, b)


@torch.no_grad()
def test_greedy_decode_is_deterministic(model):
    def greedy():
        kv, tok, out = model.new_kv(1), _seq()[:1, :5], []
        logits, kv = model.step(tok, 0, kv)
        for pos in range(5, 20):
            tok = logits[:, -1:].argmax(-1)
            out.append(int(tok))
            logits, kv = model.step(tok, pos, kv)
        return out

    assert greedy() == greedy()


def test_layer_dropout_is_stochastic_in_training_only():
    torch.manual_seed(0)
    model = Policy(PolicyConfig(**{**CFG.to_dict(), "layer_dropout": 0.9}))
    idx = _seq()
    model.train()
    assert not torch.equal(model(idx), model(idx))
    model.eval()
    assert torch.equal(model(idx), model(idx))


def test_sizes_demo_small_bench_80_to_100m():
    with torch.device("meta"):
        demo = Policy(PolicyConfig.demo(vocab_size=600, max_ctx=128)).num_params()
        bench = Policy(PolicyConfig.bench(vocab_size=600, max_ctx=256)).num_params()
    assert demo < 3e6
    assert 80e6 <= bench <= 100e6


def test_config_rejects_bad_exits_and_round_trips_json():
    with pytest.raises(ValueError):
        PolicyConfig(vocab_size=10, n_layer=4, exits=(4,))
    assert PolicyConfig.from_dict(CFG.to_dict()) == CFG


@given(st.integers(0, 40), st.integers(0, 300), st.integers(1, 512), st.data())
def test_vocab_ranges_are_contiguous_and_action_ids_round_trip(n_instr, n_obs, n_act, data):
    v = Vocab(n_instr=n_instr, n_obs_bins=n_obs, n_action_bins=n_act)
    assert v.instr_start == len(v.specials) and v.obs_start == v.instr_start + n_instr
    assert (
        v.action_start == v.obs_start + n_obs and v.size == v.action_stop == v.action_start + n_act
    )
    bins = np.array(data.draw(st.lists(st.integers(0, n_act - 1), min_size=1, max_size=16)))
    ids = v.action_to_vocab(bins)
    assert v.is_action(ids).all() and (v.vocab_to_action(ids) == bins).all()
    assert torch.equal(
        v.vocab_to_action(v.action_to_vocab(torch.from_numpy(bins))), torch.from_numpy(bins)
    )
    with pytest.raises(ValueError):
        v.action_to_vocab(n_act)
    with pytest.raises(ValueError):
        v.vocab_to_action(v.action_start - 1)
    assert Vocab.from_dict(v.to_dict()) == v


def test_checkpoint_round_trip_is_exact(model, tmp_path):
    vocab = Vocab(n_instr=7, n_obs_bins=16, n_action_bins=34)
    assert vocab.size == CFG.vocab_size
    checkpoint.save(tmp_path / "policy", model, vocab, meta={"tokenizer": {"bins": 34}})
    assert (tmp_path / "policy.safetensors").exists() and (tmp_path / "policy.json").exists()
    ck = checkpoint.load(tmp_path / "policy.safetensors")
    assert ck.cfg == CFG and ck.vocab == vocab and ck.meta == {"tokenizer": {"bins": 34}}
    idx = _seq()
    assert torch.equal(ck.model(idx), model(idx))


def test_checkpoint_rejects_vocab_that_does_not_fit(model, tmp_path):
    with pytest.raises(ValueError):
        checkpoint.save(tmp_path / "p", model, Vocab(n_instr=1, n_obs_bins=1, n_action_bins=1))


def test_step_past_max_ctx_is_refused(model):
    with pytest.raises(ValueError, match="max_ctx"):
        model.step(torch.zeros(1, 4, dtype=torch.int64), CFG.max_ctx - 3, model.new_kv(1))
