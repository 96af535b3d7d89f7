"""models.grow: a policy widened x2 computes the same logits at every exit, in training
forward and in the static-shape step, and its copies can diverge in training."""

from __future__ import annotations

import torch

from models.config import PolicyConfig
from models.grow import widen
from models.policy import Policy


def _small() -> Policy:
    torch.manual_seed(0)
    model = Policy(PolicyConfig.demo(40, max_ctx=16, n_layer=3, n_embd=16, n_head=2, exits=(1, 2)))
    for p in model.parameters():  # trained-looking weights, not the init's zero biases
        p.data += 0.05 * torch.randn_like(p)
    return model.eval()


def test_widened_policy_has_the_same_logits_at_every_exit_and_in_step():
    model = _small()
    wide = widen(model, noise=0.1, seed=1)
    assert (wide.cfg.n_embd, wide.cfg.n_head, wide.cfg.exits) == (32, 4, (1, 2))
    idx = torch.randint(0, 40, (3, 12))
    a, b = model.forward_all_exits(idx), wide.forward_all_exits(idx)
    assert a.keys() == b.keys()
    for d in a:
        torch.testing.assert_close(b[d], a[d], atol=1e-5, rtol=1e-4)
    la, _ = model.step(idx[:1, :5], 0, model.new_kv())
    lb, kv = wide.step(idx[:1, :5], 0, wide.new_kv())
    torch.testing.assert_close(lb, la, atol=1e-5, rtol=1e-4)
    assert kv.shape == wide.cfg.kv_shape(1)


def test_widened_copies_get_different_gradients():
    wide = widen(_small(), noise=0.1, seed=1).train()
    idx = torch.randint(0, 40, (3, 12))
    wide(idx).logsumexp(-1).mean().backward()
    g = wide.blocks[0].mlp.c_fc.weight.grad
    half = g.shape[0] // 2
    assert not torch.allclose(g[:half], g[half:])  # an even split would make these equal
