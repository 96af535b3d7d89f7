"""FFN skipping as graphs per level: how much of a decode step token-level gating could save.

Token-level gating (issue 21) skips a sub-layer for a token whose router score is below a
threshold. Skipping the FFN keeps every KV entry (attention still runs), so routes stay
causal and per token. In ONNX Runtime the 1-token step only gets faster if the skipped
FFN's MatMuls are not in the graph it runs, so each level is its own graph set. This module
builds those graph sets for a static route: the FFNs of the `skip` deepest layers removed
for every token. That is what a router would do at the threshold where it skips those layers
for all tokens, and so it bounds what any FFN gating can save per step at this model size;
it is untrained (no router yet, no fine-tuning), so its token agreement with dense is a
floor, not the gated model's accuracy.

    python -m models.gating models/zoo/conveyor-v1 OUT --skip 2 4 6
"""
from __future__ import annotations

import copy
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
    import dataclasses

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


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--skip", type=int, nargs="+", default=[0, 2, 4, 6])
    a = ap.parse_args(argv)
    print(json.dumps({n: str(p) for n, p in export_levels(a.model, a.out, a.skip).items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
