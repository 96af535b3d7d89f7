"""FFN-skip levels: graph sets without the FFNs of the N deepest layers (graphs per level).

Skipping a token's FFN keeps its KV (attention still runs), so a route stays causal and per
token. In ONNX Runtime a 1-token step only gets faster if the skipped FFN's MatMuls are not
in the graph it runs, so each level is its own graph set. `export_levels` builds them for a
static route (the FFNs of the N deepest layers removed for every token): what a router does
at the threshold where it skips those layers for all tokens, so it bounds what FFN gating can
save per step at a model size. Untrained; `finetune_level` fine-tunes one level instead.
Measured by `rtinfer bench dynamic` (`ffn-skip:N` rows); CLI: `python -m models.gating`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import torch
from torch import nn

from models import checkpoint
from models.export import export_all

SPEC_FILES = ("tokenizer.json", "obs_tokens.json")


class NoFFN(nn.Module):
    """The FFN of a skipped layer: adds nothing to the residual (no MatMul in the graph)."""

    def forward(self, x):
        return torch.zeros_like(x)


def skip_ffn(policy: nn.Module, layers) -> nn.Module:
    """A copy of `policy` whose blocks `layers` (0-based) have no FFN."""
    out = copy.deepcopy(policy).eval()
    for l in layers:
        out.blocks[l].ln_2, out.blocks[l].mlp = nn.Identity(), NoFFN()
    return out


def ffn_flops_fraction(cfg, skip: int) -> float:
    """Matmul FLOPs of a 1-token step at full depth with `skip` FFNs removed, over dense's
    (attention over the whole max_ctx buffer and the LM head included)."""
    C, V, T, L = cfg.n_embd, cfg.vocab_size, cfg.max_ctx, cfg.n_layer
    dense = L * (24 * C * C + 4 * T * C) + 2 * C * V
    return (dense - skip * 16 * C * C) / dense


def export_levels(model_dir, out_dir, skips=(0, 2, 4, 6), k_verify: int = 8) -> dict:
    """One model directory per level under out_dir (`skip{N}`): decode, verify and prefill
    graphs at full depth with the FFNs of the N deepest layers removed. Returns
    {N: its path}. Seconds at the shipped size."""
    from rtinfer.model.directory import ModelDir

    src, out = Path(model_dir), Path(out_dir)
    md, ck = ModelDir.load(src), checkpoint.load(Path(model_dir) / "policy")
    cfg = dataclasses.replace(ck.cfg, exits=(), layer_dropout=0.0)
    base = copy.deepcopy(ck.model)
    base.cfg = cfg
    paths = {}
    for n in skips:
        d = out / f"skip{n}"
        layers = range(cfg.n_layer - n, cfg.n_layer)
        export_all(
            skip_ffn(base, layers),
            cfg,
            d,
            k_verify=k_verify,
            prefix_len=[md.prefix_len],
            vocab=ck.vocab,
            fp16=False,
        )
        for name in SPEC_FILES:
            shutil.copyfile(src / name, d / name)
        (d / "card.json").write_text(
            json.dumps({"ffn_skipped_layers": list(layers), "from": src.name})
        )
        paths[n] = d
    return paths


def finetune_level(
    model_dir, out_dir, skip: int, demos, val, *, steps: int, batch: int, lr: float = 3e-4
) -> dict:
    """The model with the FFNs of its `skip` deepest layers removed, fine-tuned (every
    remaining weight, exits included: models.train.fit; token accuracy on `val` before and
    after) and exported as a model directory with the source's prefill lengths, exits and
    tokenizers (fp32). Returns the card."""
    from models.train import evaluate_tokens, fit
    from rtinfer.model.directory import ModelDir

    src, out = Path(model_dir), Path(out_dir)
    md, ck = ModelDir.load(src), checkpoint.load(Path(model_dir) / "policy")
    layers = list(range(ck.cfg.n_layer - skip, ck.cfg.n_layer))
    model = skip_ffn(ck.model, layers)
    for p in model.parameters():
        p.requires_grad_(True)
    before = evaluate_tokens(model, val)
    log, seconds = fit(
        model, demos, steps=steps, batch=batch, lr=lr, seed=0, desc=f"ffn-skip {skip}"
    )
    model.eval()
    after = evaluate_tokens(model, val)
    prefixes = sorted(
        {
            g["k"]
            for g in md.manifest["graphs"]
            if "prefill" in g["roles"] and g["depth"] == ck.cfg.n_layer and g["dtype"] == "float32"
        }
    )
    export_all(model, ck.cfg, out, k_verify=8, prefix_len=prefixes, vocab=ck.vocab, fp16=False)
    for name in SPEC_FILES:
        shutil.copyfile(src / name, out / name)
    card = {
        "name": out.name,
        "params": sum(p.numel() for p in model.parameters()),
        "ffn_skipped_layers": layers,
        "from": src.name,
        "config": ck.cfg.to_dict(),
        "accuracy": {str(d): a for d, a in after.items()},
        "training": {
            "steps": steps,
            "batch": batch,
            "lr": lr,
            "train_seconds": seconds,
            "token_accuracy_before": before,
            "log": log,
        },
    }
    (out / "card.json").write_text(json.dumps(card, indent=1))
    return card


def step_times(
    shape: tuple[int, int, int],
    vocab_size: int,
    max_ctx: int,
    skips,
    rounds: int = 5,
    steps: int = 100,
    pos: int = 40,
    seed: int = 0,
) -> dict:
    """1-token full-depth step p50 (us) of a random-weight policy of `shape` (n_layer, n_embd,
    n_head) with each level's FFNs removed, ONNX Runtime CPU, 1 thread, IOBinding (inputs and
    outputs bound once, as the backend does); levels interleaved, `rounds` rounds of `steps`
    steps. Returns per level the median step and its ratio to level 0 (per round, median)."""
    import tempfile
    import time

    import numpy as np
    import onnxruntime as ort

    from models.config import PolicyConfig
    from models.export import export_graph
    from models.policy import Policy

    n_layer, n_embd, n_head = shape
    cfg = PolicyConfig(
        vocab_size=vocab_size,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        max_ctx=max_ctx,
        exits=(),
    )
    torch.manual_seed(seed)
    base = Policy(cfg).eval()
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    runs, times = {}, {n: [] for n in skips}
    with tempfile.TemporaryDirectory() as tmp:
        for n in skips:
            path = export_graph(
                skip_ffn(base, range(n_layer - n, n_layer)), n_layer, 1, Path(tmp) / f"skip{n}.onnx"
            )
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            arrays = [
                np.full((1, 1), 7, np.int64),
                np.array([pos], np.int64),
                np.zeros(cfg.kv_shape(1), np.float32),
                np.zeros((1, 1, vocab_size), np.float32),
                np.zeros(cfg.kv_shape(1), np.float32),
            ]
            b = sess.io_binding()
            for name, a in zip(("tokens", "start_pos", "kv"), arrays[:3]):
                b.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(a))
            for name, a in zip(("logits", "kv_out"), arrays[3:]):
                b.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(a))
            runs[n] = (sess, b, arrays)
        for r in range(rounds):
            for n in skips[r % len(skips) :] + skips[: r % len(skips)]:
                sess, b, _ = runs[n]
                ts = []
                for _ in range(steps):
                    t0 = time.perf_counter_ns()
                    sess.run_with_iobinding(b)
                    ts.append(time.perf_counter_ns() - t0)
                times[n].append(float(np.median(ts)))
    base_t = np.array(times[skips[0]])
    return {
        "shape": list(shape),
        "params": base.num_params(),
        "rounds": rounds,
        "steps": steps,
        "levels": {
            n: {
                "step_p50_us": float(np.median(times[n])) / 1e3,
                "ratio": float(np.median(np.array(times[n]) / base_t)),
                "flops_fraction": ffn_flops_fraction(cfg, n),
            }
            for n in skips
        },
    }
