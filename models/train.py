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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import Progress

from rtinfer.realtime.spin import on_signals

from . import checkpoint, sparsity
from .config import PolicyConfig
from .data import Demos, load, split
from .policy import Policy


def exit_weights(cfg: PolicyConfig) -> dict[int, float]:
    """LayerSkip-style early-exit loss scale: deeper exits weigh more, full depth most."""
    w = {d: d / cfg.n_layer for d in cfg.depths}
    total = sum(w.values())
    return {d: v / total for d, v in w.items()}


def action_loss(
    model: Policy,
    seqs: torch.Tensor,
    targets: torch.Tensor,
    a0: int,
    a1: int,
    weights: dict[int, float],
    teacher: Teacher | None = None,
) -> tuple[torch.Tensor, dict[int, float]]:
    """Weighted CE over exits on the action positions; logits restricted to the action range
    (the runtime masks to it too). With a teacher, each exit's loss is (1 - w) * CE on the
    data plus w * the teacher term (Teacher.loss). Returns (loss, token accuracy per exit,
    against the data)."""
    labels = seqs[:, targets + 1] - a0
    # The last action token is never an input that matters, so the sequence stops before it.
    inputs = seqs[:, :-1]
    soft = teacher.log_probs(inputs, targets, a0, a1) if teacher is not None else None
    loss, acc = 0.0, {}
    for depth, logits in model.forward_all_exits(inputs, targets).items():
        la = logits[:, :, a0:a1]
        term = F.cross_entropy(la.reshape(-1, a1 - a0), labels.reshape(-1))
        if soft is not None:
            term = (1 - teacher.weight) * term + teacher.weight * teacher.loss(la, soft)
        loss = loss + weights[depth] * term
        acc[depth] = (la.argmax(-1) == labels).float().mean().item()
    return loss, acc


class Teacher:
    """A frozen policy to distil from (same vocab and sequence layout), at full depth.

    mode "labels": cross-entropy against the teacher's greedy token at each action position
    (what a draft model must reproduce); "logits": KL(teacher || student) over the action
    range. weight: the teacher term's share of each exit's loss (1.0: the data's labels are
    not used)."""

    def __init__(self, model: Policy, mode: str = "labels", weight: float = 1.0):
        if mode not in ("labels", "logits") or not 0.0 <= weight <= 1.0:
            raise ValueError(f"distill mode {mode!r} / weight {weight}: labels|logits, [0, 1]")
        self.model, self.mode, self.weight = model.eval().requires_grad_(False), mode, weight

    @torch.no_grad()
    def log_probs(self, inputs, targets, a0: int, a1: int) -> torch.Tensor:
        logits = self.model.forward_all_exits(inputs, targets)[self.model.cfg.n_layer]
        return F.log_softmax(logits[:, :, a0:a1].float(), dim=-1)

    def loss(self, student_logits, soft) -> torch.Tensor:
        n = soft.shape[-1]
        if self.mode == "labels":
            return F.cross_entropy(student_logits.reshape(-1, n), soft.argmax(-1).reshape(-1))
        return F.kl_div(
            F.log_softmax(student_logits, -1).reshape(-1, n),
            soft.reshape(-1, n),
            log_target=True,
            reduction="batchmean",
        )


@torch.no_grad()
def evaluate_tokens(model: Policy, demos: Demos, batch: int = 512) -> dict[int, float]:
    """Per-exit action-token accuracy (teacher forced) on a dataset."""
    model.eval()
    v, t = demos.vocab, torch.from_numpy(demos.targets)
    hits: dict[int, float] = {}
    for i in range(0, len(demos), batch):
        s = torch.from_numpy(demos.seqs[i : i + batch])
        _, acc = action_loss(model, s, t, v.action_start, v.action_stop, exit_weights(model.cfg))
        for d, a in acc.items():
            hits[d] = hits.get(d, 0.0) + a * len(s)
    model.train()
    return {d: h / len(demos) for d, h in hits.items()}


@torch.no_grad()
def teacher_agreement(
    model: Policy, teacher: Policy, demos: Demos, batch: int = 512
) -> dict[int, float]:
    """Per-exit fraction of action positions (teacher forced on the data) where the model's
    greedy token equals the teacher's full-depth greedy token."""
    model.eval()
    v, t = demos.vocab, torch.from_numpy(demos.targets)
    a0, a1, hits = v.action_start, v.action_stop, {}
    for i in range(0, len(demos), batch):
        s = torch.from_numpy(demos.seqs[i : i + batch])[:, :-1]
        ref = teacher.forward_all_exits(s, t)[teacher.cfg.n_layer][:, :, a0:a1].argmax(-1)
        for d, logits in model.forward_all_exits(s, t).items():
            same = (logits[:, :, a0:a1].argmax(-1) == ref).float().mean().item()
            hits[d] = hits.get(d, 0.0) + same * len(s)
    model.train()
    return {d: h / len(demos) for d, h in hits.items()}


def instruction_weights(demos: Demos) -> np.ndarray:
    """Per-row sampling weights that give every instruction the same share of batches, so
    the policy cannot score well by learning the most frequent class -> bin mapping."""
    _, inverse, counts = np.unique(
        demos.instructions, axis=0, return_inverse=True, return_counts=True
    )
    w = 1.0 / counts[inverse.reshape(-1)]
    return w / w.sum()


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the training state was saved at `step`."""

    def __init__(self, signum: int, step: int, path):
        super().__init__(f"stopped by signal {signum} after step {step}; state in {path}")
        self.signum, self.step, self.path = signum, step, path


@dataclass
class Resumable:
    """Where fit keeps its training state: `path` is written every `every` steps (0: only
    at the end and on SIGINT/SIGTERM); resume: continue from it. `run` identifies the run
    (a state written by another run is refused)."""

    path: Path
    run: dict
    every: int = 200
    resume: bool = False


@contextmanager
def _stop_on_signals(enabled: bool):
    """Turn SIGINT/SIGTERM into a flag the loop checks after each step (the state is then
    saved between two steps, never in the middle of one). Not enabled: signals act as usual."""
    got: list[int] = []
    if not enabled:
        yield got
        return
    with on_signals(got.append):
        yield got


def fit(
    model: Policy,
    train: Demos,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    desc: str,
    on_step=None,
    balance: bool = True,
    teacher: Teacher | None = None,
    state: Resumable | None = None,
) -> tuple[list[dict], float]:
    """AdamW with warmup + cosine decay; returns (the log (every 100 steps), training
    seconds, all sessions). balance: sample rows so that every instruction is equally
    frequent. state: checkpoint the run (model, optimizer, scheduler, RNGs, step) so that a
    resumed run ends with the same weights, bit for bit, as one never stopped; raises
    Interrupted (after saving) on SIGINT/SIGTERM."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.from_numpy(instruction_weights(train)) if balance else None
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05, betas=(0.9, 0.95))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(steps, 1))))
        ),
    )
    v, t, w = train.vocab, torch.from_numpy(train.targets), exit_weights(model.cfg)
    seqs, log, start, before_s = torch.from_numpy(train.seqs), [], 0, 0.0
    if state is not None and state.resume:
        start, log, before_s = checkpoint.load_training_state(
            state.path, model, opt, sched, generator=g, run=state.run
        )
    t0 = time.perf_counter()
    seconds = lambda: round(before_s + time.perf_counter() - t0, 1)  # noqa: E731

    def save(done: int):
        checkpoint.save_training_state(
            state.path,
            model,
            opt,
            sched,
            step=done,
            generator=g,
            log=log,
            run=state.run,
            seconds=seconds(),
        )

    model.train()
    with Progress() as bar, _stop_on_signals(state is not None) as stop:
        task = bar.add_task(desc, total=steps, completed=start)
        for step in range(start, steps):
            idx = (
                torch.multinomial(weights, batch, replacement=True, generator=g)
                if weights is not None
                else torch.randint(len(seqs), (batch,), generator=g)
            )
            loss, acc = action_loss(model, seqs[idx], t, v.action_start, v.action_stop, w, teacher)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if on_step is not None:
                on_step()
            if step % 100 == 0 or step == steps - 1:
                log.append(
                    {
                        "step": step,
                        "loss": round(loss.item(), 4),
                        "lr": sched.get_last_lr()[0],
                        "acc": {str(d): round(a, 4) for d, a in acc.items()},
                        "elapsed_s": seconds(),
                    }
                )
                bar.update(task, description=f"{desc} loss {loss.item():.3f}")
                if not bar.console.is_terminal and step % 500 == 0:
                    print(json.dumps({"phase": desc, **log[-1]}), flush=True)
            bar.advance(task)
            if state is not None and stop:
                save(step + 1)
                raise Interrupted(stop[0], step + 1, state.path)
            if state is not None and state.every and (step + 1) % state.every == 0:
                save(step + 1)
        if state is not None:
            save(steps)
    return log, seconds()


STATE = "train_state.safetensors"


def _config(a, vocab_size: int) -> PolicyConfig:
    """The model size from the command line (defaults: PolicyConfig.demo, the shipped size)."""
    size = {
        k: v
        for k, v in (
            ("n_layer", a.n_layer),
            ("n_embd", a.n_embd),
            ("n_head", a.n_head),
            ("exits", a.exits),
        )
        if v is not None
    }
    return PolicyConfig.demo(vocab_size, max_ctx=a.max_ctx, layer_dropout=a.layer_dropout, **size)


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
    ap.add_argument("--n-layer", type=int, default=None, help="blocks (default 6)")
    ap.add_argument("--n-embd", type=int, default=None, help="width (default 128)")
    ap.add_argument("--n-head", type=int, default=None, help="attention heads (default 4)")
    ap.add_argument(
        "--exits",
        type=int,
        nargs="*",
        default=None,
        help="early-exit depths (default 2 4; none: full depth only)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--init",
        default=None,
        help="warm start from this checkpoint (same vocab; its size is used)",
    )
    ap.add_argument("--teacher", default=None, help="distil from this checkpoint (same vocab)")
    ap.add_argument(
        "--distill",
        default="labels",
        choices=["labels", "logits"],
        help="labels: the teacher's greedy tokens; logits: KL to its distribution",
    )
    ap.add_argument(
        "--distill-weight",
        type=float,
        default=1.0,
        help="the teacher term's share of the loss (the rest: the data's labels)",
    )
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=200,
        help=f"steps between training states (<out>/{STATE}); 0: only at the end "
        "and on SIGINT/SIGTERM",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help=f"continue from <out>/{STATE} (same arguments); a 2:4 fine-tune "
        "that was stopped restarts from the finished dense phase",
    )
    ap.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="class->bin permutation to hold out of training, e.g. 2,0,1 (repeatable)",
    )
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE
    if a.resume and not state_path.exists():
        raise SystemExit(f"--resume: {state_path} does not exist (nothing to resume)")
    if state_path.exists() and not a.resume:
        raise SystemExit(
            f"{state_path} holds an unfinished run: pass --resume to continue it, "
            "or delete it to start again"
        )

    held_out = [[int(x) for x in e.split(",")] for e in a.exclude]
    demos = load(a.data, exclude_instructions=held_out)
    train, val = split(demos, 0.05, a.seed)
    init_meta = {}
    if a.init:
        ck = checkpoint.load(a.init)
        model, cfg, init_meta = ck.model, ck.cfg, ck.meta
        if model.cfg.vocab_size != demos.vocab.size:
            raise SystemExit(
                f"--init {a.init}: vocab size {cfg.vocab_size} != data's {demos.vocab.size}"
            )
        if any(x is not None for x in (a.n_layer, a.n_embd, a.n_head, a.exits)):
            raise SystemExit(
                "--init takes the checkpoint's size: drop --n-layer/--n-embd/"
                "--n-head/--exits (models.grow makes a larger start)"
            )
    else:
        cfg = _config(a, demos.vocab.size)
        model = Policy(cfg)
    teacher = None
    if a.teacher:
        t_model = checkpoint.load(a.teacher).model
        if t_model.cfg.vocab_size != demos.vocab.size:
            raise SystemExit(
                f"--teacher {a.teacher}: vocab size {t_model.cfg.vocab_size} != "
                f"data's {demos.vocab.size}"
            )
        teacher = Teacher(t_model, a.distill, a.distill_weight)
    run = {
        "config": cfg.to_dict(),
        "data": [str(d) for d in a.data],
        "steps": a.steps,
        "batch": a.batch,
        "lr": a.lr,
        "seed": a.seed,
        "init": a.init,
        "teacher": a.teacher,
        "distill": a.distill if a.teacher else None,
        "distill_weight": a.distill_weight if a.teacher else None,
        "held_out": held_out,
    }
    state = Resumable(state_path, run, a.checkpoint_every, a.resume)
    try:
        log, dense_s = fit(
            model,
            train,
            steps=a.steps,
            batch=a.batch,
            lr=a.lr,
            seed=a.seed,
            desc="train",
            teacher=teacher,
            state=state,
        )
    except Interrupted as e:
        print(f"{e}; continue with the same command plus --resume", flush=True)
        return 128 + e.signum
    val_acc = evaluate_tokens(model, val)
    meta = {
        "tokenizer_config": demos.tokenizer_config,
        "obs_tokens_spec": demos.obs_tokens_spec,
        "train_rows": len(train),
        "val_rows": len(val),
        "held_out_instructions": held_out,
        "val_token_accuracy": {str(d): round(x, 4) for d, x in val_acc.items()},
        "train_seconds": dense_s,
        "steps": a.steps,
        "batch": a.batch,
        "seed": a.seed,
        "data": [str(d) for d in a.data],
        "init": a.init,
        "balanced_instructions": True,
        "lr": a.lr,
        "params": model.num_params(),
    }
    if "grown_from" in init_meta:  # the start's own provenance (models.grow)
        meta["grown_from"] = init_meta["grown_from"]
    if teacher is not None:
        agree = teacher_agreement(model, teacher.model, val)
        meta.update(
            teacher=a.teacher,
            distill=a.distill,
            distill_weight=a.distill_weight,
            val_teacher_agreement={str(d): round(x, 4) for d, x in agree.items()},
        )
    checkpoint.save(out / "policy", model, demos.vocab, meta)
    result = {"dense": {**meta, "log": log}}

    if a.sparse_steps > 0:
        sparse = copy.deepcopy(model)
        sparsifier = sparsity.prepare(sparse)
        t0 = time.perf_counter()
        slog, _ = fit(
            sparse,
            train,
            steps=a.sparse_steps,
            batch=a.batch,
            lr=a.lr / 4,
            seed=a.seed + 1,
            desc="2:4 fine-tune",
            on_step=sparsifier.step,
        )
        sparsity.fold(sparse)
        s_acc = evaluate_tokens(sparse, val)
        smeta = {
            **meta,
            "sparsity": "2:4 (torch.ao.pruning WeightNormSparsifier 1x4, 2 zeros)",
            "val_token_accuracy": {str(d): round(x, 4) for d, x in s_acc.items()},
            "finetune_seconds": round(time.perf_counter() - t0, 1),
            "finetune_steps": a.sparse_steps,
            "all_24": all(sparsity.report(sparse).values()),
        }
        checkpoint.save(out / "sparse24" / "policy", sparse, demos.vocab, smeta)
        result["sparse24"] = {**smeta, "log": slog}
    (out / "train_log.json").write_text(json.dumps(result, indent=1))
    state_path.unlink()  # the run is finished: policy.safetensors is its result
    print(
        json.dumps(
            {
                k: {kk: v[kk] for kk in ("val_token_accuracy", "train_rows")}
                for k, v in result.items()
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
