"""FFN-skip levels (models.ffn_skip): each level's graphs lack the skipped FFNs' MatMuls,
skipping none reproduces dense greedy, a fine-tuned level is a servable model directory;
FFN routers (models.gating): threshold 0 is dense, above 1 skips every FFN."""

import numpy as np
import onnx
from conftest import random_obs_body

from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.model.sequence import build_prefix


def _matmuls(path) -> int:
    return sum(n.op_type in ("MatMul", "Gemm") for n in onnx.load(str(path)).graph.node)


def _greedy(be, prefix):
    be.reset()
    logits = be.prefill(prefix, 0).copy()
    return Decoder(be).decode(logits, len(prefix), be.model.chunk_tokens).copy()


def test_ffn_skip_levels_drop_the_ffn_matmuls_and_level_0_is_dense(tiny_model_dir, tmp_path):
    from models.ffn_skip import export_levels

    paths = export_levels(tiny_model_dir, tmp_path, skips=(0, 1, 3), k_verify=4)
    dense = get_backend("onnx").load(tiny_model_dir)
    counts = {n: _matmuls(p / "step_d3_k1.onnx") for n, p in paths.items()}
    assert counts[0] == _matmuls(tiny_model_dir / "step_d3_k1.onnx")
    assert counts[0] - counts[1] == 2 and counts[0] - counts[3] == 6  # c_fc and c_proj
    level0 = get_backend("onnx").load(paths[0])
    level3 = get_backend("onnx").load(paths[3])
    same, differ = 0, 0
    for seed in range(5):
        md = dense.model
        prefix = build_prefix(
            md.vocab, *md.obs.encode(random_obs_body(np.random.default_rng(seed)))
        )
        ref = _greedy(dense, prefix)
        same += (_greedy(level0, prefix) == ref).all()
        differ += (_greedy(level3, prefix) != ref).any()
    assert same == 5 and differ > 0


def _demos(tiny_model_dir, n=64, seed=0):
    """Random action sequences in the tiny model's layout (labels: random bins)."""
    from models import checkpoint
    from models.data import Demos
    from rtinfer.model.sequence import build_sequence, target_positions

    ck = checkpoint.load(tiny_model_dir / "policy")
    rng, v = np.random.default_rng(seed), ck.vocab
    instr = rng.integers(0, 3, (n, 3))
    seqs = np.stack(
        [
            build_sequence(v, instr[i], rng.integers(0, 16, 10), rng.integers(0, 32, 12))
            for i in range(n)
        ]
    )
    return ck, Demos(seqs, target_positions(3, 10, 12), v, 3, 10, {}, {}, instr)


def test_router_threshold_0_is_dense_above_1_skips_every_ffn_and_the_penalty_lowers_gates(
    tiny_model_dir,
):
    import torch

    from models.ffn_skip import skip_ffn
    from models.gating import GatedPolicy, evaluate, train

    ck, demos = _demos(tiny_model_dir)
    gated = GatedPolicy(ck.model)
    idx = torch.from_numpy(demos.seqs[:4, :-1])
    with torch.no_grad():
        assert torch.equal(gated(idx, 0.0)[0], ck.model(idx))
        none = skip_ffn(ck.model, range(ck.cfg.n_layer))
        assert torch.allclose(gated(idx, 1.1)[0], none(idx), atol=1e-5)
    r = evaluate(gated, demos, [0.0, 1.1])
    assert r["0"]["agreement"] == 1.0 and r["0"]["skipped"] == 0.0 and r["1.1"]["skipped"] == 1.0
    with torch.no_grad():
        before = gated(idx)[1].mean().item()
    train(gated, demos, steps=30, batch=16, penalty=5.0)
    with torch.no_grad():
        assert gated(idx)[1].mean().item() < before


def test_a_finetuned_ffn_skip_level_exports_a_model_directory_the_runner_serves(
    tiny_model_dir, tmp_path
):
    from models.ffn_skip import finetune_level
    from rtinfer.inference.budget import BudgetLevel
    from rtinfer.inference.runner import TokenRunner
    from rtinfer.model.directory import ModelDir

    ck, demos = _demos(tiny_model_dir)
    card = finetune_level(tiny_model_dir, tmp_path / "skip1", 1, demos, demos, steps=3, batch=8)
    assert card["ffn_skipped_layers"] == [2] and card["params"] < ck.model.num_params()
    md = ModelDir.load(tmp_path / "skip1")
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(0)))
    bins, _ = TokenRunner(md, drafter="chunk").run(instr, obs, 0, BudgetLevel(3, 3, 3))
    assert bins.shape == (12,)


def test_a_routed_model_skips_ffns_through_ifs_and_stays_lossless_under_speculation(
    tiny_model_dir, tmp_path
):
    import torch
    from safetensors.torch import save_file

    from models.gating import GatedPolicy, export_routed
    from rtinfer.inference.drafters import ChunkReuseDrafter

    ck, _ = _demos(tiny_model_dir)
    gated = GatedPolicy(ck.model)
    torch.manual_seed(0)
    for r in gated.routers:  # routes that depend on the token
        torch.nn.init.normal_(r.weight, std=2.0)
        torch.nn.init.zeros_(r.bias)
    save_file(
        {k: t.contiguous() for k, t in gated.routers.state_dict().items()},
        str(tmp_path / "r.safetensors"),
    )
    routed = export_routed(
        tiny_model_dir, tmp_path / "r.safetensors", tmp_path / "t0", 0.0, k_verify=4
    )
    half = export_routed(
        tiny_model_dir, tmp_path / "r.safetensors", tmp_path / "t5", 0.5, k_verify=4
    )
    ifs = [n.op_type for n in onnx.load(str(half / "step_d3_k1.onnx")).graph.node].count("If")
    assert ifs == 3
    dense, all_on, gated_be = (get_backend("onnx").load(p) for p in (tiny_model_dir, routed, half))
    md = dense.model
    differ = 0
    for seed in range(4):
        prefix = build_prefix(
            md.vocab, *md.obs.encode(random_obs_body(np.random.default_rng(seed)))
        )
        ref = _greedy(dense, prefix)
        assert (_greedy(all_on, prefix) == ref).all()  # tau 0: every FFN runs
        plain = _greedy(gated_be, prefix)
        differ += (plain != ref).any()
        gated_be.reset()
        logits = gated_be.prefill(prefix, 0).copy()
        d = ChunkReuseDrafter(3, 4)
        d.set_previous(ref, 0, 50_000_000, 50_000_000)
        spec = Decoder(gated_be).decode(logits, len(prefix), 12, drafter=d)
        assert (spec == plain).all()  # causal routes: speculative == the routed plain greedy
    assert differ > 0
