"""2:4 sparsity: torch.ao masks on the block Linears, fold, and checks on torch and ONNX."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models import checkpoint, sparsity
from models.config import PolicyConfig
from models.export import export_graph
from models.policy import Policy

torch.set_num_threads(2)
CFG = PolicyConfig(vocab_size=40, n_layer=3, n_head=2, n_embd=32, max_ctx=16, exits=(1,))


def _sparse_model():
    torch.manual_seed(0)
    model = Policy(CFG)
    sparsity.prepare(model)
    sparsity.fold(model)
    return model


def test_prepare_then_fold_makes_every_block_linear_24():
    model = _sparse_model()
    rep = sparsity.report(model)
    assert len(rep) == 4 * CFG.n_layer and all(rep.values())
    w = model.blocks[0].mlp.c_fc.weight
    assert (w == 0).float().mean().item() == pytest.approx(0.5, abs=0.01)


def test_embeddings_and_lm_head_stay_dense():
    model = _sparse_model()
    for w in (model.wte.weight, model.wpe.weight, model.lm_head.weight):
        assert torch.count_nonzero(w) == w.numel()
    assert not sparsity.check_24(model.lm_head.weight)


def test_dense_weight_fails_the_check():
    assert not sparsity.check_24(torch.randn(8, 16))
    assert not sparsity.check_24(np.ones((4, 6)))  # input size not a multiple of 4


def test_fine_tuning_under_masks_keeps_the_pattern():
    torch.manual_seed(0)
    model = Policy(CFG)
    sp = sparsity.prepare(model)
    before = model.blocks[1].attn.c_attn.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    idx = torch.randint(0, CFG.vocab_size, (4, 12))
    for _i in range(3):
        loss = torch.nn.functional.cross_entropy(model(idx[:, :-1]).transpose(1, 2), idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sp.step()
    assert all(sparsity.report(model).values())
    folded = sparsity.fold(model)
    assert len(folded) == 4 * CFG.n_layer
    after = model.blocks[1].attn.c_attn.weight.detach()
    assert not torch.equal(before, after)
    assert torch.equal(before == 0, after == 0)  # the mask did not move
    assert all(sparsity.report(model).values())


def test_fold_refuses_a_model_that_was_never_masked():
    with pytest.raises(ValueError, match="2:4"):
        sparsity.fold(Policy(CFG))


def test_checkpoint_refuses_model_with_masks_attached(tmp_path):
    model = Policy(CFG)
    sparsity.prepare(model)
    with pytest.raises(ValueError, match="fold"):
        checkpoint.save(tmp_path / "p", model)


@settings(max_examples=50)
@given(st.integers(1, 6), st.integers(1, 8), st.data())
def test_check_24_accepts_exactly_two_of_four_along_input_axis(rows, groups, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    w = rng.uniform(0.1, 1.0, size=(rows, groups, 4))
    for r in range(rows):
        for g in range(groups):
            w[r, g, rng.choice(4, size=2, replace=False)] = 0.0
    w = w.reshape(rows, groups * 4)
    assert sparsity.check_24(w) and sparsity.check_24(w.T.copy(), in_axis=0)
    r, c = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, groups * 4 - 1))
    if w[r, c] == 0:
        w[r, c] = 0.5  # a group with only one zero left
        assert not sparsity.check_24(w)


def test_pattern_survives_onnx_export(tmp_path):
    model = _sparse_model()
    path = export_graph(model, CFG.n_layer, 1, tmp_path / "g.onnx")
    found = sparsity.check_onnx_24(path)
    blocks = {n: ok for n, ok in found.items() if n.startswith("blocks.")}
    # names come back as torch fqns; MatMul stores W^T, so the input axis is 0
    assert sorted(blocks) == sorted(f"{n}_T" for n in sparsity.sparse_targets(model))
    assert all(blocks.values())
    assert found["lm_head.weight_T"] is False
