"""Distil a plan drafter (rtinfer.inference.plan_drafter) from a target policy's own greedy chunks.

    python -m models.distil_plan --model models/zoo/conveyor-v1 \
        --streams ep1.npz ep2.npz --out models/zoo/conveyor-v1-draft/plan_drafter.npz

Each stream is an .npz of recorded observations (instruction_tokens (N, C), obs_tokens
(N, L), optionally episode (N,): as examples/conveyor_sorting/collect.py writes them).
`trace` decodes every cycle with speculative greedy (ONNX Runtime) and records each draft
call's state: the tokens final so far and chunk reuse's plan, with the chunk the target
decoded (its plain greedy chunk: the decode is token-identical). `fit` trains the MLP to
give, for every token not yet final, its offset from the plan (cross-entropy over -R..R;
tokens further off are left out: the plan drafter cannot reach them). `--rounds 2` traces
again with the first round's drafter and trains on both (the states its own drafts lead
to, as DAgger does for a policy).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rtinfer.bench.decode import token_stream
from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter
from rtinfer.inference.plan_drafter import PlanDrafter, PlanMLP, PlanShape, features
from rtinfer.model.sequence import build_prefix

FIELDS = ("index", "plan", "chunk", "obs", "instr")


class _Recorder(ChunkReuseDrafter):
    """Chunk reuse that keeps every draft call's (index, plan) before anything moves it."""

    def __init__(self, horizon: int, dim: int):
        super().__init__(horizon, dim)
        self.calls: list[tuple[int, np.ndarray]] = []

    def draft(self, ctx, k):
        d = super().draft(ctx, k)
        self.calls.append((ctx.index, self.plan.copy()))
        return d


def trace(model_dir, streams: list, mlp: PlanMLP | None = None) -> dict:
    """Every draft call over every cycle of `streams`: FIELDS -> stacked arrays."""
    be = get_backend("onnx").load(model_dir)
    md, dec = be.model, Decoder(be)
    rec = _Recorder(md.tokenizer.horizon, md.tokenizer.dim)
    drafter = rec if mlp is None else PlanDrafter(rec, mlp, md.vocab)
    rows: dict[str, list] = {k: [] for k in FIELDS}
    for path in streams:
        with np.load(path, allow_pickle=False) as z:
            episode = z["episode"] if "episode" in z.files else np.zeros(len(z["obs_tokens"]))
        prev = None
        for i, (instr, obs) in enumerate(token_stream(md, len(episode), 0, path)):
            prefix = build_prefix(md.vocab, instr, obs)
            if prev is None or episode[i] != episode[i - 1]:
                rec.clear()
            else:
                rec.set_previous(prev, 0, 1, 1)
            if mlp is not None:
                drafter.start(prefix)
            rec.calls.clear()
            be.reset()
            prev = dec.decode(
                be.prefill(prefix, 0), len(prefix), md.chunk_tokens, drafter=drafter
            ).copy()
            for index, plan in rec.calls:
                for k, v in zip(FIELDS, (index, plan, prev, obs, instr)):
                    rows[k].append(v)
    return {k: np.array(v) for k, v in rows.items()}


def fit(
    shape: PlanShape,
    data: dict,
    hidden: int = 256,
    steps: int = 6000,
    batch: int = 256,
    seed: int = 0,
    log=print,
) -> PlanMLP:
    """Train the offsets MLP on trace rows (torch, one thread)."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    r, n, c = shape.radius, shape.chunk_tokens, shape.classes
    x = torch.tensor(features(shape, data["obs"], data["instr"], data["plan"], data["index"]))
    chunk = data["chunk"]
    off = chunk - data["plan"]
    cls = np.clip(off, -r, r) + r
    reach = np.abs(off) <= r
    if shape.top:  # the ends of the bins, where the offsets cannot reach
        for k, b in ((2 * r + 1, 0), (2 * r + 2, shape.top)):
            cls = np.where(~reach & (chunk == b), k, cls)
            reach |= chunk == b
    mask = (np.arange(n)[None] >= data["index"][:, None]) & reach
    y, m = torch.tensor(cls), torch.tensor(mask, dtype=torch.float32)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, n * c),
    )
    opt = torch.optim.AdamW(net.parameters(), 2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=steps)
    t0 = time.time()
    for s in range(steps):
        b = torch.randint(0, len(x), (batch,))
        loss = torch.nn.functional.cross_entropy(
            net(x[b]).view(-1, c), y[b].view(-1), reduction="none"
        )
        loss = (loss * m[b].view(-1)).sum() / m[b].sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if s % 1000 == 0 or s == steps - 1:
            log(f"step {s}: loss {loss.item():.4f} ({time.time() - t0:.0f} s)")
    lin = [layer for layer in net if isinstance(layer, torch.nn.Linear)]
    return PlanMLP(
        shape,
        [layer.weight.detach().numpy().T.copy() for layer in lin],
        [layer.bias.detach().numpy().copy() for layer in lin],
    )


def shape_for(model_dir, radius: int = 7, anchors=(0, 1, 2), ends: bool = True) -> PlanShape:
    md = get_backend("onnx").load(model_dir).model
    return PlanShape(
        md.chunk_tokens,
        md.tokenizer.dim,
        md.obs.length,
        md.obs.instr_length,
        md.obs.instr_classes,
        radius,
        tuple(anchors),
        md.path.name,
        md.vocab.n_action_bins - 1 if ends else 0,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="the target policy's directory")
    p.add_argument("--streams", nargs="+", required=True, help="recorded observation .npz")
    p.add_argument("--out", required=True, help="weights .npz to write")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument(
        "--anchors",
        type=int,
        nargs="*",
        default=[0, 1, 2],
        help="observation tokens in the same bins as a waypoint's first dimensions",
    )
    a = p.parse_args(argv)
    shape, mlp = shape_for(a.model, anchors=a.anchors), None
    data: dict[str, list] = {k: [] for k in FIELDS}
    for r in range(a.rounds):
        for k, v in trace(a.model, a.streams, mlp).items():
            data[k].append(v)
        merged = {k: np.concatenate(v) for k, v in data.items()}
        print(f"round {r + 1}: {len(merged['index'])} draft states")
        mlp = fit(shape, merged, a.hidden, a.steps)
    mlp.save(a.out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
