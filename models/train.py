"""Behaviour cloning with the LayerSkip recipe: cross-entropy on action tokens only, at every
exit (shared final norm + head), with per-sample layer dropout; then 2:4 fine-tuning.

    python -m models.train --data demos.npz --out runs/conveyor-v1 [--steps 3000]

Writes `<out>/policy.safetensors` (+ .json), `<out>/train_log.json`, and with --sparse-steps
also `<out>/sparse24/policy.safetensors`. Seeded; CPU threads set explicitly.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import Progress

from . import checkpoint, sparsity
from .config import PolicyConfig
from .data import Demos, load, split
from .policy import Policy



def exit_weights(cfg: PolicyConfig) -> dict[int, float]:
    """LayerSkip-style early-exit loss scale: deeper exits weigh more, full depth most."""
    w = {d: d / cfg.n_layer for d in cfg.depths}
    total = sum(w.values())
    return {d: v / total for d, v in w.items()}


def action_loss(model: Policy, seqs: torch.Tensor, targets: torch.Tensor, a0: int, a1: int,
                weights: dict[int, float]) -> tuple[torch.Tensor, dict[int, float]]:
    """Weighted CE over exits on the action positions; logits restricted to the action range
    (the runtime masks to it too). Returns (loss, token accuracy per exit)."""
    labels = seqs[:, targets + 1] - a0
    loss, acc = 0.0, {}
    # The last action token is never an input that matters, so the sequence stops before it.
    for depth, logits in model.forward_all_exits(seqs[:, :-1], targets).items():
        la = logits[:, :, a0:a1]
        loss = loss + weights[depth] * F.cross_entropy(la.reshape(-1, a1 - a0), labels.reshape(-1))
        acc[depth] = (la.argmax(-1) == labels).float().mean().item()
    return loss, acc


@torch.no_grad()
def evaluate_tokens(model: Policy, demos: Demos, batch: int = 512) -> dict[int, float]:
    """Per-exit action-token accuracy (teacher forced) on a dataset."""
    model.eval()
    v, t = demos.vocab, torch.from_numpy(demos.targets)
    hits: dict[int, float] = {}
    for i in range(0, len(demos), batch):
        s = torch.from_numpy(demos.seqs[i:i + batch])
        _, acc = action_loss(model, s, t, v.action_start, v.action_stop, exit_weights(model.cfg))
        for d, a in acc.items():
            hits[d] = hits.get(d, 0.0) + a * len(s)
    model.train()
    return {d: h / len(demos) for d, h in hits.items()}


def instruction_weights(demos: Demos) -> np.ndarray:
    """Per-row sampling weights that give every instruction the same share of batches, so
    the policy cannot score well by learning the most frequent class -> bin mapping."""
    _, inverse, counts = np.unique(demos.instructions, axis=0, return_inverse=True,
                                   return_counts=True)
    w = 1.0 / counts[inverse.reshape(-1)]
    return w / w.sum()


def fit(model: Policy, train: Demos, *, steps: int, batch: int, lr: float, seed: int,
        desc: str, on_step=None, balance: bool = True) -> list[dict]:
    """AdamW with warmup + cosine decay; returns the log (every 100 steps). balance: sample
    rows so that every instruction is equally frequent."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.from_numpy(instruction_weights(train)) if balance else None
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05, betas=(0.9, 0.95))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / max(steps, 1)))))
    v, t, w = train.vocab, torch.from_numpy(train.targets), exit_weights(model.cfg)
    seqs, log, t0 = torch.from_numpy(train.seqs), [], time.perf_counter()
    model.train()
    with Progress() as bar:
        task = bar.add_task(desc, total=steps)
        for step in range(steps):
            idx = torch.multinomial(weights, batch, replacement=True, generator=g) \
                if weights is not None else torch.randint(len(seqs), (batch,), generator=g)
            loss, acc = action_loss(model, seqs[idx], t, v.action_start, v.action_stop, w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if on_step is not None:
                on_step()
            if step % 100 == 0 or step == steps - 1:
                log.append({"step": step, "loss": round(loss.item(), 4), "lr": sched.get_last_lr()[0],
                            "acc": {str(d): round(a, 4) for d, a in acc.items()},
                            "elapsed_s": round(time.perf_counter() - t0, 1)})
                bar.update(task, description=f"{desc} loss {loss.item():.3f}")
                if not bar.console.is_terminal and step % 500 == 0:
                    print(json.dumps({"phase": desc, **log[-1]}), flush=True)
            bar.advance(task)
    return log


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, nargs="+", help="one or more .npz datasets")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--sparse-steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--layer-dropout", type=float, default=0.1)
    ap.add_argument("--max-ctx", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init", default=None, help="warm start from this checkpoint (same vocab)")
    ap.add_argument("--exclude", action="append", default=[],
                    help="class->bin permutation to hold out of training, e.g. 2,0,1 (repeatable)")
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    held_out = [[int(x) for x in e.split(",")] for e in a.exclude]
    demos = load(a.data, exclude_instructions=held_out)
    train, val = split(demos, 0.05, a.seed)
    if a.init:
        model = checkpoint.load(a.init).model
        cfg = model.cfg
        if model.cfg.vocab_size != demos.vocab.size:
            raise SystemExit(f"--init {a.init}: vocab size {cfg.vocab_size} != data's {demos.vocab.size}")
    else:
        cfg = PolicyConfig.demo(demos.vocab.size, max_ctx=a.max_ctx, layer_dropout=a.layer_dropout)
        model = Policy(cfg)
    t0 = time.perf_counter()
    log = fit(model, train, steps=a.steps, batch=a.batch, lr=a.lr, seed=a.seed, desc="train")
    dense_s = time.perf_counter() - t0
    val_acc = evaluate_tokens(model, val)
    meta = {"tokenizer_config": demos.tokenizer_config, "obs_tokens_spec": demos.obs_tokens_spec,
            "train_rows": len(train), "val_rows": len(val), "held_out_instructions":
            held_out, "val_token_accuracy":
            {str(d): round(x, 4) for d, x in val_acc.items()}, "train_seconds": round(dense_s, 1),
            "steps": a.steps, "batch": a.batch, "seed": a.seed, "data": [str(d) for d in a.data],
            "init": a.init, "balanced_instructions": True,
            "params": model.num_params()}
    checkpoint.save(out / "policy", model, demos.vocab, meta)
    result = {"dense": {**meta, "log": log}}

    if a.sparse_steps > 0:
        sparse = copy.deepcopy(model)
        sparsifier = sparsity.prepare(sparse)
        t0 = time.perf_counter()
        slog = fit(sparse, train, steps=a.sparse_steps, batch=a.batch, lr=a.lr / 4,
                   seed=a.seed + 1, desc="2:4 fine-tune", on_step=sparsifier.step)
        sparsity.fold(sparse)
        s_acc = evaluate_tokens(sparse, val)
        smeta = {**meta, "sparsity": "2:4 (torch.ao.pruning WeightNormSparsifier 1x4, 2 zeros)",
                 "val_token_accuracy": {str(d): round(x, 4) for d, x in s_acc.items()},
                 "finetune_seconds": round(time.perf_counter() - t0, 1),
                 "finetune_steps": a.sparse_steps, "all_24": all(sparsity.report(sparse).values())}
        checkpoint.save(out / "sparse24" / "policy", sparse, demos.vocab, smeta)
        result["sparse24"] = {**smeta, "log": slog}
    (out / "train_log.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: {kk: v[kk] for kk in ("val_token_accuracy", "train_rows")}
                      for k, v in result.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
