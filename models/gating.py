"""Token-level FFN gating: learned, causal, per-layer routers on a frozen policy.

One linear score per layer on the FFN's input (ln_2(x)), per token: a token's route depends
only on its own hidden state, so it is the same in a 1-token step and in a k-token verify
(causal threshold routing, not top-k capacity across tokens). At threshold tau the FFN runs
for a token where sigmoid(score) >= tau. `train` fits the routers on top of the shipped
weights (frozen) with the action tokens' cross-entropy plus `penalty` x the mean gate on the
decoded rows (straight-through hard gates at 0.5); `evaluate` gives, per threshold, the
fraction of FFNs skipped on the decoded rows, token accuracy and agreement with dense
(teacher forced). The routes are data-dependent: serving them would need conditional
sub-graphs in the step graphs, which are not built; models.ffn_skip's static levels bound
what they could save per step.

    python -m models.gating levels models/zoo/conveyor-v1 OUT --skip 2 4 6
    python -m models.gating train models/zoo/conveyor-v1 OUT --data /work/data16/clean.npz ...
    python -m models.gating finetune models/zoo/conveyor-v1 OUT --skip 4 --data ...
    python -m models.gating steps --shape 6 128 4 --shape 8 320 5 --shape 10 512 8
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models import checkpoint
from models.ffn_skip import export_levels, finetune_level


class GatedPolicy(nn.Module):
    """A Policy (frozen) with a per-layer, per-token FFN router; forward(idx, tau)."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy.eval()
        for p in self.policy.parameters():
            p.requires_grad_(False)
        C, L = policy.cfg.n_embd, policy.cfg.n_layer
        self.routers = nn.ModuleList(nn.Linear(C, 1) for _ in range(L))
        for r in self.routers:  # start with every FFN on
            nn.init.zeros_(r.weight)
            nn.init.constant_(r.bias, 3.0)

    def forward(self, idx, tau: float | None = None):
        """Logits (B, T, V) and gate scores (B, T, L). tau None: training (straight-through
        hard gates at 0.5); else the FFN runs where score >= tau."""
        p = self.policy
        x, scores = p._embed(idx), []
        for b, r in zip(p.blocks, self.routers):
            x = x + b.attn(b.ln_1(x))
            h = b.ln_2(x)
            s = torch.sigmoid(r(h))
            g = (s >= 0.5).float() + s - s.detach() if tau is None else (s >= tau).float()
            x = x + g * b.mlp(h)
            scores.append(s)
        return p.head(x), torch.cat(scores, -1)


def train(gated: GatedPolicy, demos, *, steps: int, batch: int, penalty: float,
          lr: float = 3e-3, seed: int = 0) -> list[float]:
    """Fit the routers; returns the loss per step."""
    v = demos.vocab
    a0, a1, t = v.action_start, v.action_stop, torch.from_numpy(demos.targets)
    opt = torch.optim.Adam(gated.routers.parameters(), lr=lr)
    rng, seqs, losses = np.random.default_rng(seed), torch.from_numpy(demos.seqs), []
    for _ in range(steps):
        rows = seqs[rng.integers(0, len(seqs), batch)]
        logits, s = gated(rows[:, :-1])
        ce = F.cross_entropy(logits[:, t, a0:a1].reshape(-1, a1 - a0),
                             (rows[:, t + 1] - a0).reshape(-1))
        loss = ce + penalty * s[:, t].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate(gated: GatedPolicy, demos, taus, batch: int = 512) -> dict:
    """Per tau: skipped (fraction of FFNs skipped on the decoded rows), per_layer_skipped,
    accuracy (vs the data's action tokens) and agreement (vs the dense argmax)."""
    v = demos.vocab
    a0, a1, t = v.action_start, v.action_stop, torch.from_numpy(demos.targets)
    seqs = torch.from_numpy(demos.seqs)
    out = {}
    for tau in [None, *taus]:
        acc = agree = n = 0
        skipped = torch.zeros(gated.policy.cfg.n_layer)
        for i in range(0, len(seqs), batch):
            rows = seqs[i:i + batch]
            if tau is None:
                pred = gated.policy(rows[:, :-1])[:, t, a0:a1].argmax(-1)
                dense = out.setdefault("dense_pred", [])
                dense.append(pred)
            else:
                logits, s = gated(rows[:, :-1], tau)
                pred = logits[:, t, a0:a1].argmax(-1)
                agree += (pred == out["dense_pred"][i // batch]).sum().item()
                skipped += (s[:, t] < tau).float().sum((0, 1))
            acc += (pred == rows[:, t + 1] - a0).sum().item()
            n += pred.numel()
        key = "dense" if tau is None else f"{tau:g}"
        out[key] = {"accuracy": acc / n}
        if tau is not None:
            out[key].update(agreement=agree / n, skipped=float(skipped.sum() / n / len(skipped)),
                            per_layer_skipped=[round(float(x), 4) for x in skipped / n])
    out.pop("dense_pred")
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lv = sub.add_parser("levels", help="FFN-skip graph sets, one model directory per level")
    lv.add_argument("model")
    lv.add_argument("out")
    lv.add_argument("--skip", type=int, nargs="+", default=[0, 2, 4, 6])
    tr = sub.add_parser("train", help="fit routers on the model's frozen weights")
    tr.add_argument("model")
    tr.add_argument("out", help="routers checkpoint (.safetensors) and results (.json) stem")
    tr.add_argument("--data", nargs="+", required=True)
    tr.add_argument("--steps", type=int, default=300)
    tr.add_argument("--batch", type=int, default=64)
    tr.add_argument("--penalty", type=float, nargs="+", default=[0.05, 0.2, 0.5])
    tr.add_argument("--taus", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    tr.add_argument("--val", type=float, default=0.05)
    st = sub.add_parser("steps", help="1-token step time per FFN-skip level, random weights")
    st.add_argument("--shape", type=int, nargs=3, action="append", required=True,
                    metavar=("N_LAYER", "N_EMBD", "N_HEAD"))
    st.add_argument("--vocab-size", type=int, default=519)
    st.add_argument("--max-ctx", type=int, default=64)
    st.add_argument("--rounds", type=int, default=5)
    ft = sub.add_parser("finetune", help="one FFN-skip level, fine-tuned, as a model directory")
    ft.add_argument("model")
    ft.add_argument("out")
    ft.add_argument("--skip", type=int, required=True)
    ft.add_argument("--data", nargs="+", required=True)
    ft.add_argument("--steps", type=int, default=200)
    ft.add_argument("--batch", type=int, default=64)
    ft.add_argument("--lr", type=float, default=3e-4)
    a = ap.parse_args(argv)
    if a.cmd == "steps":
        from models.ffn_skip import step_times
        torch.set_num_threads(1)
        for shape in a.shape:
            skips = sorted({0, shape[0] // 2, shape[0] - 1, shape[0]})
            print(json.dumps(step_times(tuple(shape), a.vocab_size, a.max_ctx, skips,
                                        a.rounds)), flush=True)
        return 0
    if a.cmd == "levels":
        print(json.dumps({n: str(p) for n, p in export_levels(a.model, a.out, a.skip).items()}))
        return 0
    import time

    from safetensors.torch import save_file

    from models import data
    torch.set_num_threads(1)
    if a.cmd == "finetune":
        card = finetune_level(a.model, a.out, a.skip, *data.split(data.load(a.data), 0.02, 0),
                              steps=a.steps, batch=a.batch, lr=a.lr)
        print(json.dumps({k: card[k] for k in ("name", "params", "accuracy")}))
        return 0
    tr_set, val = data.split(data.load(a.data), a.val, 0)
    results = {"data": a.data, "train_rows": len(tr_set), "val_rows": len(val),
               "steps": a.steps, "batch": a.batch, "runs": {}}
    for pen in a.penalty:
        gated = GatedPolicy(checkpoint.load(Path(a.model) / "policy").model)
        t0 = time.monotonic()
        losses = train(gated, tr_set, steps=a.steps, batch=a.batch, penalty=pen)
        results["runs"][f"{pen:g}"] = {"train_seconds": time.monotonic() - t0,
                                       "loss_first_last": [losses[0], losses[-1]],
                                       **evaluate(gated, val, a.taus)}
        save_file({k: t.contiguous() for k, t in gated.routers.state_dict().items()},
                  f"{a.out}-p{pen:g}.safetensors")
        Path(f"{a.out}.json").write_text(json.dumps(results, indent=1))
        print(json.dumps({pen: results["runs"][f"{pen:g}"]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
