"""The sparse-MoE FFN policy (models.moe) and its shipped directory (conveyor-v1-moe): causal
per-token routes, an exact upcycle, a load-balancing loss that balances, graphs that match
torch, speculative greedy identical to plain greedy, and a directory the node accepts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models import checkpoint, moe

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo"
MOE, DENSE = ZOO / "conveyor-v1-moe", ZOO / "conveyor-v1"
SIX = {"0,1,2", "0,2,1", "1,0,2", "1,2,0", "2,0,1", "2,1,0"}
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def shipped():
    policy, vocab, info = moe.load(MOE / "moe")
    return policy, vocab, info


def _routes(policy) -> torch.Tensor:
    """(n_layer, B, T) routes of the last forward."""
    return torch.stack([b.mlp.last["route"] for b in policy.blocks])


def test_a_tokens_route_is_the_same_alone_and_in_a_batch_of_8(shipped):
    policy = shipped[0]
    rng = np.random.default_rng(0)
    prefix = torch.from_numpy(rng.integers(0, policy.cfg.vocab_size, (1, 20)))
    tokens = torch.from_numpy(rng.integers(0, policy.cfg.vocab_size, (1, 8)))
    with torch.no_grad():
        _, kv = policy.step(prefix, 0, policy.new_kv())
        batch_logits, _ = policy.step(tokens, 20, kv)
        batch = _routes(policy)[:, 0]  # (L, 8)
        alone, logits = [], []
        for j in range(8):
            lg, kv = policy.step(tokens[:, j : j + 1], 20 + j, kv)
            alone.append(_routes(policy)[:, 0, 0])
            logits.append(lg)
    assert torch.equal(torch.stack(alone, 1), batch)
    assert len(batch.unique()) > 1  # the router really chooses (not one expert everywhere)
    torch.testing.assert_close(torch.cat(logits, 1), batch_logits, atol=1e-4, rtol=0)


def test_upcycled_moe_and_grown_wide_ffn_compute_the_dense_function():
    dense = checkpoint.load(DENSE / "policy").model
    x = torch.randint(0, dense.cfg.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = dense(x)
        up, wide = moe.upcycle(dense, 4).eval(), moe.widen_ffn(dense, 4).eval()
        torch.testing.assert_close(up(x), ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(wide(x), ref, atol=1e-4, rtol=0)
    assert moe.active_params(up) == dense.num_params() + 6 * 128 * 4  # + the routers
    assert abs(wide.num_params() - up.num_params()) < 0.01 * up.num_params()


def test_balance_loss_is_one_when_balanced_and_e_when_collapsed():
    E = 4
    even = torch.zeros(8, E)
    assert moe.balance_loss(even, torch.arange(8) % E, E).item() == pytest.approx(1.0)
    collapsed = torch.full((8, E), -30.0)
    collapsed[:, 0] = 30.0
    assert moe.balance_loss(collapsed, torch.zeros(8, dtype=torch.long), E).item() == pytest.approx(
        E, rel=1e-4
    )


def _train_router_on_balance_alone(aux_weight: float):
    """A router that sends every token to expert 0, trained with no loss on the output."""
    torch.manual_seed(0)
    m = moe.MoEMLP(16, 4, aux_weight=aux_weight).train()
    with torch.no_grad():
        m.router.weight.normal_(0, 0.02)
        m.router.weight[0, 0] = 1.0
    h = torch.randn(256, 1, 16)
    h[:, :, 0] = h[:, :, 0].abs() + 2.0  # a shared positive feature: all pick expert 0
    opt = torch.optim.SGD(m.router.parameters(), lr=0.5)
    first = None
    for _ in range(50):
        out = m(h)
        first = m.last["aux"] if first is None else first
        opt.zero_grad()
        (0.0 * out).sum().backward()
        opt.step()
    m(h)
    return first, m.last["aux"], len(m.last["route"].unique())


def test_balance_loss_alone_spreads_a_collapsed_router():
    """The aux term reaches the router through the module (AuxLoss): trained on it alone,
    tokens move off the one expert they all chose; with weight 0 nothing moves."""
    first, last, used = _train_router_on_balance_alone(1.0)
    assert first > 3.0 and last < 1.5 and used == 4, (first, last, used)
    first, last, used = _train_router_on_balance_alone(0.0)
    assert last == first and used == 1


def test_exported_graphs_match_torch(shipped):
    from models.parity import greedy_parity, step_parity

    policy = shipped[0]
    for name, depth, k in [
        ("step_d6_k1.onnx", 6, 1),
        ("step_d6_k8.onnx", 6, 8),
        ("step_d2_k1.onnx", 2, 1),
    ]:
        p = step_parity(policy, MOE / name, depth, k, seed=3)
        assert p["max_abs_logits"] < 1e-3 and p["argmax_equal"], (name, p)
    g = greedy_parity(policy, MOE / "step_d6_k32.onnx", MOE / "step_d6_k1.onnx", seed=3)
    assert g["match"], g


def test_one_token_graph_gathers_one_expert_and_has_no_conditionals():
    import onnx

    ops = [
        n.op_type
        for n in onnx.load(str(MOE / "step_d6_k1.onnx"), load_external_data=False).graph.node
    ]
    dense = [
        n.op_type
        for n in onnx.load(str(DENSE / "step_d6_k1.onnx"), load_external_data=False).graph.node
    ]
    assert "If" not in ops and ops.count("ArgMax") == 6
    # the expert's two MatMuls plus the router per layer: one more MatMul a layer than dense
    assert ops.count("MatMul") - dense.count("MatMul") <= 6


def test_speculative_greedy_over_the_moe_graphs_is_token_identical_to_plain_greedy():
    from rtinfer.bench.decode import measure, prefix_stream
    from rtinfer.inference.backends import get_backend
    from rtinfer.inference.drafters import ChunkReuseDrafter

    be = get_backend("onnx").load(MOE, threads=1)
    tok = be.model.tokenizer
    prefixes = list(prefix_stream(be.model, 24, 0, MOE / "stream.npz"))
    m = measure(be, {"chunk": ChunkReuseDrafter(tok.horizon, tok.dim)}, prefixes, 8)
    assert m["chunk"]["verifies"] > 0 and m["chunk"]["accepted"] > 0
    assert m["chunk"]["identical"]


def test_shipped_directory_loads_passes_check_model_and_its_card_is_measured():
    from rtinfer.cli.check_model import problems
    from rtinfer.model.directory import ModelDir

    md = ModelDir.load(MOE)
    found, summary = problems(str(MOE))
    assert found == [], found
    card = json.loads((MOE / "card.json").read_text())
    info = json.loads((MOE / "moe.json").read_text())
    assert card["ffn"]["kind"] == info["ffn"]["kind"] == "moe"
    assert card["active_params"] < card["params"] / 2
    full = card["success"]["seen_instructions"][str(md.n_layer)]
    assert set(full["per_instruction"]) == SIX
    assert all(v["spawned"] >= 100 for v in full["per_instruction"].values())
    assert sum(f.stat().st_size for f in MOE.rglob("*") if f.is_file()) < 40_000_000


def test_if_mode_one_token_graph_runs_only_the_chosen_expert_and_matches_torch(tmp_path):
    """The alternative 1-token export (mode "if"): each layer's experts in nested ONNX Ifs."""
    import onnx

    from models.export import StepGraph
    from models.parity import step_parity

    policy = moe.set_mode(moe.load(MOE / "moe")[0], "if")
    args = (
        torch.zeros(1, 1, dtype=torch.int64),
        torch.zeros(1, dtype=torch.int64),
        torch.zeros(policy.cfg.kv_shape(1)),
    )
    path = tmp_path / "step_d6_k1.onnx"
    with torch.no_grad():
        torch.onnx.export(
            StepGraph(policy, 6),
            args,
            str(path),
            opset_version=17,
            input_names=["tokens", "start_pos", "kv"],
            output_names=["logits", "kv_out"],
            dynamo=False,
        )
    assert [n.op_type for n in onnx.load(str(path)).graph.node].count("If") >= 6
    p = step_parity(policy, path, 6, 1, seed=5)
    assert p["max_abs_logits"] < 1e-3 and p["argmax_equal"], p
