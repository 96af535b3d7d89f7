"""Grow a trained policy to twice its width, computing the same function (Net2Net-style).

    python -m models.grow --checkpoint models/zoo/conveyor-v1/policy --out runs/wide/policy

Every feature of the residual stream is duplicated (x -> [x, x]), and so is every attention
head and MLP unit. A LayerNorm of [x, x] with duplicated weights is [LN(x), LN(x)] (same
mean and variance), a duplicated head attends exactly as the original (head_dim is kept, so
n_head doubles), and each weight that reads a duplicated input is split in two halves that
sum to the original: W/2 + N and W/2 - N, with N random and different in each output copy.
While the copies are equal the function is the original's to rounding; the random split
makes their gradients differ, so training can use the new width (an even split would keep
the copies equal for ever: their gradients would be equal).
Returns a checkpoint with the same vocab, depth, exits and meta; meta["grown_from"] says so.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import torch

from . import checkpoint
from .policy import Policy


def _split_in(w: torch.Tensor, copies: int, noise: float, g: torch.Generator) -> torch.Tensor:
    """Weight (out, in) reading an input duplicated [x, x] -> (out * copies, 2 * in): each
    output copy gets its own random split of w into two halves summing to w."""
    rows = []
    for _ in range(copies):
        n = torch.randn(w.shape, generator=g, dtype=w.dtype) * noise * w.std()
        rows.append(torch.cat([w / 2 + n, w / 2 - n], dim=1))
    return torch.cat(rows, dim=0)


def _dup_heads(w: torch.Tensor) -> torch.Tensor:
    """c_attn's (3C, ...) output rows [q; k; v] -> [q, q; k, k; v, v] (heads duplicated)."""
    return torch.cat([torch.cat([p, p], dim=0) for p in w.chunk(3, dim=0)], dim=0)


@torch.no_grad()
def widen(model: Policy, noise: float = 0.1, seed: int = 0) -> Policy:
    """A Policy twice as wide (n_embd and n_head doubled) computing model's function.
    noise: the random split's size relative to each weight's std."""
    cfg = model.cfg
    wide = Policy(replace(cfg, n_embd=2 * cfg.n_embd, n_head=2 * cfg.n_head))
    g = torch.Generator().manual_seed(seed)
    src, dst = model.state_dict(), {}
    for name, w in src.items():
        leaf = name.rsplit(".", 2)[-2:]  # e.g. ["c_attn", "weight"]
        if name in ("wte.weight", "wpe.weight"):
            dst[name] = torch.cat([w, w], dim=1)
        elif name == "lm_head.weight":
            dst[name] = _split_in(w, 1, noise, g)
        elif leaf[0] in ("ln_1", "ln_2", "ln_f"):
            dst[name] = torch.cat([w, w])
        elif leaf == ["c_attn", "weight"]:  # q, k and v each: split in, heads copied out
            dst[name] = torch.cat([_split_in(p, 2, noise, g) for p in w.chunk(3)], dim=0)
        elif leaf == ["c_attn", "bias"]:
            dst[name] = _dup_heads(w)
        elif leaf[1] == "weight":  # c_proj (attention, MLP) and c_fc: split in, copy out
            dst[name] = _split_in(w, 2, noise, g)
        else:  # their biases: copied out
            dst[name] = torch.cat([w, w])
    wide.load_state_dict(dst, strict=True)
    return wide.to(next(model.parameters()).dtype).eval()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="checkpoint path without extension")
    ap.add_argument("--out", required=True, help="checkpoint path of the wider policy")
    ap.add_argument("--noise", type=float, default=0.1, help="split noise / weight std")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    ck = checkpoint.load(a.checkpoint)
    wide = widen(ck.model, a.noise, a.seed)
    meta = {
        **ck.meta,
        "grown_from": {
            "checkpoint": a.checkpoint,
            "params": ck.model.num_params(),
            "method": "width x2, duplicated features, random split",
            "noise": a.noise,
            "seed": a.seed,
        },
    }
    checkpoint.save(a.out, wide, ck.vocab, meta)
    print(json.dumps({"params": wide.num_params(), "config": wide.cfg.to_dict()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
