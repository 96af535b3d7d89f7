"""Behaviour cloning for the reach arm: an MLP chunk policy, trained on collect.py's data and
packaged with models.chunk_package (the library behind `rtinfer package`).

    python -m examples.arm_reach.train --data runs/arm_reach/demos.npz --out models/zoo/arm-reach-bc

ReachMLP: observation (joints, ee, target, and target - ee) -> normalised -> MLP -> per
waypoint and joint an offset from the current joint angle -> absolute joint angles (rad),
clipped to the action spec's limits: [1, H, n]. The normalisation statistics are buffers,
so they travel inside the exported graph (the contract: the node feeds raw observations).
Loss: mean squared error of the normalised offsets; validation: joint-angle error (rad^2)
on held-out episodes. torch on the CPU, float32. After packaging, the card gets the model's
lockstep success on unseen target seeds (evaluate.py, ONNX Runtime).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from models.chunk_package import package_module
from rtinfer.model.action_spec import ActionSpec

from .evaluate import evaluate
from .lockstep import action_spec, load_robot
from .observe import example_obs

EVAL_TARGETS = 50  # per episode, two episodes, for the card's lockstep success


class ReachMLP(nn.Module):
    """obs -> (1, H, n) joint-angle waypoints within [low, high]."""

    def __init__(self, spec: ActionSpec, n: int, hidden: int = 256, layers: int = 3):
        super().__init__()
        self.n, self.horizon = n, spec.horizon
        d_in = 2 * n + 3 + 3 + 3
        dims = [d_in] + [hidden] * layers
        body = []
        for a, b in zip(dims[:-1], dims[1:]):
            body += [nn.Linear(a, b), nn.SiLU()]
        self.net = nn.Sequential(*body, nn.Linear(hidden, spec.horizon * n))
        for k, v in (
            ("x_mean", torch.zeros(d_in)),
            ("x_std", torch.ones(d_in)),
            ("y_mean", torch.zeros(spec.horizon, n)),
            ("y_std", torch.ones(spec.horizon, n)),
            ("low", torch.tensor(spec.low[:n], dtype=torch.float32)),
            ("high", torch.tensor(spec.high[:n], dtype=torch.float32)),
        ):
            self.register_buffer(k, v)

    def features(self, joints, ee, target):
        return torch.cat([joints, ee, target, target - ee], dim=-1)

    def offsets(self, joints, ee, target):
        """The normalised offsets the net predicts (B, H, n): the training target's space."""
        x = (self.features(joints, ee, target) - self.x_mean) / self.x_std
        return self.net(x).view(-1, self.horizon, self.n)

    def forward(self, joints, ee, target):
        delta = self.offsets(joints, ee, target) * self.y_std + self.y_mean
        q = joints[:, None, : self.n]
        return torch.minimum(torch.maximum(q + delta, self.low), self.high)


def train(
    data,
    *,
    steps: int = 6000,
    batch: int = 512,
    lr: float = 2e-3,
    seed: int = 0,
    hidden: int = 256,
    threads: int = 2,
    log=print,
) -> tuple[ReachMLP, dict]:
    """Fit ReachMLP to the dataset (an npz path or its arrays); (model, figures)."""
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    d = dict(np.load(data)) if isinstance(data, (str, Path)) else data
    _, control, _ = load_robot()
    spec, n = action_spec(control), control.n
    model = ReachMLP(spec, n, hidden=hidden)
    J, E, T, Y = (
        torch.from_numpy(np.asarray(d[k], np.float32)) for k in ("joints", "ee", "target", "chunk")
    )
    X = model.features(J, E, T)
    D = Y - J[:, None, :n]  # offsets from the current angles
    model.x_mean.copy_(X.mean(0))
    model.x_std.copy_(X.std(0).clamp_min(1e-3))
    model.y_mean.copy_(D.mean(0))
    model.y_std.copy_(D.std(0).clamp_min(1e-3))
    # hold out whole episodes for validation
    ep = torch.from_numpy(np.asarray(d["episode"]))
    val = ep % 10 == 9
    tr_idx, va_idx = torch.nonzero(~val).ravel(), torch.nonzero(val).ravel()
    Dn = (D - model.y_mean) / model.y_std
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    g = torch.Generator().manual_seed(seed)
    t0, history = time.perf_counter(), []
    for step in range(1, steps + 1):
        i = tr_idx[torch.randint(len(tr_idx), (batch,), generator=g)]
        loss = ((model.offsets(J[i], E[i], T[i]) - Dn[i]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 1000 == 0 or step == steps:
            v = _val_rad2(model, J, E, T, Y, va_idx)
            history.append({"step": step, "train_norm": loss.item(), "val_rad2": v})
            log(
                f"step {step}: train {loss.item():.4f} (normalised), val {v:.2e} rad^2 "
                f"({time.perf_counter() - t0:.0f} s)"
            )
    model.eval()
    figures = {
        "rows": int(len(Y)),
        "train_rows": int(len(tr_idx)),
        "val_rows": int(len(va_idx)),
        "steps": steps,
        "batch": batch,
        "train_s": round(time.perf_counter() - t0, 1),
        "threads": threads,
        "val_rmse_rad": float(np.sqrt(history[-1]["val_rad2"])),
        "history": history,
    }
    return model, figures


@torch.no_grad()
def _val_rad2(model, J, E, T, Y, idx) -> float:
    model.eval()
    out = float(((model(J[idx], E[idx], T[idx]) - Y[idx]) ** 2).mean()) if len(idx) else 0.0
    model.train()
    return out


def package(model: ReachMLP, out, figures: dict, data_summary: dict | None = None) -> dict:
    """Package the trained module as a continuous-chunk model directory; its card."""
    _, control, _ = load_robot()
    card = {
        "lineage": {
            "implementation": "examples/arm_reach/train.py ReachMLP",
            "task": "arm reach (examples/arm_reach)",
            "training": figures,
            "data": data_summary or {},
        }
    }
    return package_module(model, example_obs(control.n), out, action_spec(control), card=card)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="runs/arm_reach/demos.npz")
    ap.add_argument("--out", default="models/zoo/arm-reach-bc")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if not Path(a.data).is_file():
        ap.error(
            f"--data {a.data}: no such file; collect it first: python -m "
            f"examples.arm_reach.collect --out {a.data}"
        )
    d = np.load(a.data)
    summary = json.loads(str(d["summary"]))
    model, figures = train(d, steps=a.steps, hidden=a.hidden, threads=a.threads, seed=a.seed)
    card = package(model, a.out, figures, summary)
    success = evaluate(a.out, targets=EVAL_TARGETS, episodes=2)  # lockstep, unseen seeds
    card["success"] = {
        k: success[k]
        for k in ("targets", "reached", "success_rate", "reach_s", "seed", "latency_ms")
    }
    (Path(a.out) / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    print(
        json.dumps({"out": a.out, "levels": card["levels"], "success": card["success"], **figures}),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
