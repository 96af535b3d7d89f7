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
        export_all(skip_ffn(base, layers), cfg, d, k_verify=k_verify,
                   prefix_len=[md.prefix_len], vocab=ck.vocab, fp16=False)
        for name in SPEC_FILES:
            shutil.copyfile(src / name, d / name)
        (d / "card.json").write_text(json.dumps({"ffn_skipped_layers": list(layers),
                                                 "from": src.name}))
        paths[n] = d
    return paths


def finetune_level(model_dir, out_dir, skip: int, demos, val, *, steps: int, batch: int,
                   lr: float = 3e-4) -> dict:
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
    log, seconds = fit(model, demos, steps=steps, batch=batch, lr=lr, seed=0,
                       desc=f"ffn-skip {skip}")
    model.eval()
    after = evaluate_tokens(model, val)
    prefixes = sorted({g["k"] for g in md.manifest["graphs"] if "prefill" in g["roles"]
                       and g["depth"] == ck.cfg.n_layer and g["dtype"] == "float32"})
    export_all(model, ck.cfg, out, k_verify=8, prefix_len=prefixes, vocab=ck.vocab, fp16=False)
    for name in SPEC_FILES:
        shutil.copyfile(src / name, out / name)
    card = {"name": out.name, "params": sum(p.numel() for p in model.parameters()),
            "ffn_skipped_layers": layers, "from": src.name, "config": ck.cfg.to_dict(),
            "accuracy": {str(d): a for d, a in after.items()},
            "training": {"steps": steps, "batch": batch, "lr": lr, "train_seconds": seconds,
                         "token_accuracy_before": before, "log": log}}
    (out / "card.json").write_text(json.dumps(card, indent=1))
    return card
