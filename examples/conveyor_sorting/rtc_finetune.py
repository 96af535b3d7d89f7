"""A delay-aware fine-tune of a conveyor flow policy, in lockstep (a first step, not a release).

conveyor-flow was trained with the committed prefix drawn from its label's own leading
waypoints, and its expert keeps one mode (suction, descend) per chunk, so served conditioned
no chunk can leave the prefix's mode (docs/benchmarks/rtc.md, lockstep). This tool trains on
what the robot really commits to:
  collect   the policy drives the cell in lockstep (rtc_lockstep, guidance) at each of
            --delays-ms; for every observation answered: the observation, the committed
            prefix the robot sent (the plan it executed) and a label: the scripted expert's
            plan continued from the prefix's last waypoint (JoiningExpert), so it joins it.
  finetune  from the model directory's own graphs (their weights read back into
            models.flow_train.FlowNet: models.flow_recover), the committed rows fed clean at
            t = 0, the loss on the rest; then packaged (levels 10 and 4 steps) to --out.

    python -m examples.conveyor_sorting.rtc_finetune collect --out rows.npz --seed 300
    python -m examples.conveyor_sorting.rtc_finetune finetune --data rows.npz --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.realtime.complaints import say

from . import rtc_lockstep
from .config import CellConfig, tokenizer_config
from .expert import JoiningExpert
from .observe import obs_from_body

MODEL = "models/zoo/conveyor-flow"
KEYS = ("objects", "gantry", "held", "instruction")


def collect(
    model: str, delays_ms: list[float], seed: int, seconds: float, max_n: int = 8
) -> dict[str, np.ndarray]:
    """Rows (module doc) from one lockstep run per delay, the policy serving with guidance."""
    rows: dict[str, list] = {k: [] for k in (*KEYS, "actions", "committed", "n_committed")}
    cell = CellConfig()
    answer = rtc_lockstep.LockstepNode.answer

    def labelled(node, env):
        obs, c = obs_from_body(env.body), env.body.get("committed")
        prefix = np.zeros((0, 4)) if c is None else np.asarray(c["values"][:max_n], float)
        expert.prefix = prefix
        com = np.zeros((16, 4), np.float32)
        com[: len(prefix)] = prefix
        for k in KEYS:
            rows[k].append(np.asarray(obs[k]))
        rows["actions"].append(expert.act(obs).astype(np.float32))  # sees every observation
        rows["committed"].append(com)
        rows["n_committed"].append(len(prefix))
        answer(node, env)

    rtc_lockstep.LockstepNode.answer = labelled
    try:
        with tempfile.TemporaryDirectory() as d:
            for i, delay in enumerate(delays_ms):
                expert = JoiningExpert(cell, tokenizer_config(cell, horizon=16))
                fig = rtc_lockstep.run_point(
                    model,
                    "rtc",
                    delay,
                    seed + i,
                    seconds=seconds,
                    jitter=0.2,
                    tmp=Path(d),
                    flow_rtc="guide",
                )
                say(
                    "collect",
                    f"{delay:g} ms: {fig['correct']} / {fig['resolved']} sorted, "
                    f"{len(rows['actions'])} rows",
                    error=False,
                )
    finally:
        rtc_lockstep.LockstepNode.answer = answer
    return {k: np.stack(v) for k, v in rows.items()}


def finetune(model: str, data: dict, steps: int, lr: float, seed: int = 0, log=print):
    """(net, stats) fine-tuned from the model directory's graphs on `data` (collect's rows)."""
    import torch

    from models.flow_recover import recover
    from models.flow_train import committed_mask, sample_times

    from .flow_policy import cond_features, cup

    net, stats = recover(model)
    t = {k: torch.from_numpy(data[k]) for k in KEYS}
    cond = (cond_features(*(t[k] for k in KEYS)) - torch.tensor(stats["cond_mean"])) / torch.tensor(
        stats["cond_std"]
    )
    scale, offset = (torch.tensor(stats[k]) for k in ("act_scale", "act_offset"))
    y = (torch.from_numpy(data["actions"]) - cup(t["gantry"]) - offset) / scale
    com = (torch.from_numpy(data["committed"]) - cup(t["gantry"]) - offset) / scale
    n = torch.from_numpy(data["n_committed"]).long()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    net.train()
    t0, run = time.perf_counter(), None
    for step in range(1, steps + 1):
        i = torch.randint(0, len(y), (256,), generator=gen)
        yb, cb, nb = y[i], com[i], n[i]
        b, h, _ = yb.shape
        noise = torch.randn(yb.shape, generator=gen)
        rec = (torch.arange(h)[None, :] < nb[:, None]) & (nb > 0)[:, None]
        done = torch.where((nb > 0)[:, None], rec, committed_mask(b, h, 8, 0.5, gen))
        tt = torch.where(done, 0.0, sample_times(b, gen)[:, None].expand(b, h))
        x_t = torch.where(rec.unsqueeze(-1), cb, tt[..., None] * noise + (1 - tt[..., None]) * yb)
        v = net.velocity(net.encode(cond[i]), x_t, tt)
        w = (~done).unsqueeze(-1).float()
        loss = (((v - (noise - yb)) ** 2) * w).sum() / (w.sum() * yb.shape[-1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        run = loss.item() if run is None else 0.95 * run + 0.05 * loss.item()
        if step % 50 == 0 or step == steps:
            log(
                json.dumps(
                    {"step": step, "loss": round(run, 4), "s": round(time.perf_counter() - t0, 1)}
                )
            )
    return net.eval(), stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.rtc_finetune", description=__doc__.splitlines()[0]
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--model", default=MODEL)
    c.add_argument("--out", required=True)
    c.add_argument("--delays-ms", type=float, nargs="+", default=[0, 50, 100, 150, 200, 250])
    c.add_argument("--seed", type=int, default=300)
    c.add_argument("--seconds", type=float, default=20.0)
    f = sub.add_parser("finetune")
    f.add_argument("--model", default=MODEL)
    f.add_argument("--data", nargs="+", required=True)
    f.add_argument("--out", required=True, help="the model directory to write")
    f.add_argument("--steps", type=int, default=250)
    f.add_argument("--lr", type=float, default=1e-4)
    a = p.parse_args(argv)
    if a.cmd == "collect":
        np.savez(a.out, **collect(a.model, a.delays_ms, a.seed, a.seconds))
        return 0
    from models.flow_train import save

    from .flow_policy import package

    parts = [dict(np.load(path)) for path in a.data]
    data = {k: np.concatenate([d[k] for d in parts]) for k in parts[0]}
    net, stats = finetune(a.model, data, a.steps, a.lr)
    with tempfile.TemporaryDirectory() as d:
        save(net, Path(d) / "net.pt", {"stats": stats})
        package(
            Path(d) / "net.pt",
            a.out,
            steps=(10, 4),
            card={"name": "conveyor-flow (delay-aware fine-tune, not released)"},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
