"""Token-level FFN gating: learned, causal, per-layer routers on a frozen policy.

One linear score per layer on the FFN's input (ln_2(x)), per token: a token's route depends
only on its own hidden state, so it is the same in a 1-token step and in a k-token verify
(causal threshold routing, not top-k capacity across tokens). At threshold tau the FFN runs
for a token where sigmoid(score) >= tau. `train` fits the routers on top of the shipped
weights (frozen) with the action tokens' cross-entropy plus `penalty` x the mean gate on the
decoded rows (straight-through hard gates at 0.5); `evaluate` gives, per threshold, the
fraction of FFNs skipped on the decoded rows, token accuracy and agreement with dense
(teacher forced). `export_routed` writes a model directory at one threshold (a graph set
per level): in its 1-token graphs each FFN sits in an ONNX If (its MatMuls run only for a
routed token), in its k-token graphs the batch is computed and skipped rows are masked.

    python -m models.gating levels models/zoo/conveyor-v1 OUT --skip 2 4 6
    python -m models.gating train models/zoo/conveyor-v1 OUT --data /work/data16/clean.npz ...
    python -m models.gating finetune models/zoo/conveyor-v1 OUT --skip 4 --data ...
    python -m models.gating steps --shape 6 128 4 --shape 8 320 5 --shape 10 512 8
    python -m models.gating export models/zoo/conveyor-v1 ROUTERS.safetensors OUT --tau 0.5
    python -m models.gating ship models/zoo/conveyor-v1-large ROUTERS OUT --tau 0.5 0.7 \
        [--levels MEASURED.json]   # dense + gated budget levels in one directory
`ship_gated` writes one model directory that serves the dense policy and a gated graph set per
threshold, declared in graphs.json "gated" (docs/policies.md "Gated budget levels").
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from models import checkpoint
from models.ffn_skip import SPEC_FILES, export_levels, finetune_level
from rtinfer.model.manifest import MANIFEST, read_manifest, write_manifest


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


@torch.jit.script
def _ffn_if(
    h: torch.Tensor,
    score: torch.Tensor,
    tau: float,
    w1t: torch.Tensor,
    b1: torch.Tensor,
    w2t: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """One token's FFN, run only when its score reaches tau (an ONNX If when exported). The
    weights come transposed (folded at export into the same tensors the dense graphs hold,
    so a gated set shares the directory's weights.bin)."""
    if bool(score.reshape(-1)[0] >= tau):
        return torch.matmul(F.gelu(torch.matmul(h, w1t) + b1), w2t) + b2
    return torch.zeros_like(h)


class RoutedMLP(nn.Module):
    """A block's FFN behind its router at a fixed threshold: for one token an If (the FFN's
    MatMuls run only when routed), for k tokens the batch computed and the skipped rows
    masked. Either way a token's route is sigmoid(score) >= tau, per token."""

    def __init__(self, mlp: nn.Module, router: nn.Linear, tau: float):
        super().__init__()
        self.mlp, self.router, self.tau = mlp, router, float(tau)

    def forward(self, h):
        score = torch.sigmoid(self.router(h))
        if h.shape[1] == 1:  # a trace-time constant: the 1-token graph gets the If
            m = self.mlp
            return _ffn_if(
                h,
                score,
                self.tau,
                m.c_fc.weight.t(),
                m.c_fc.bias,
                m.c_proj.weight.t(),
                m.c_proj.bias,
            )
        return (score >= self.tau).to(h.dtype) * self.mlp(h)


def routed_policy(gated: GatedPolicy, tau: float) -> nn.Module:
    """A copy of the gated model's policy whose FFNs sit behind their routers at tau: it
    exports through models.export like any Policy (the step-graph contract unchanged)."""
    out = copy.deepcopy(gated.policy).eval()
    for b, r in zip(out.blocks, copy.deepcopy(gated.routers)):
        b.mlp = RoutedMLP(b.mlp, r, tau)
    return out


def export_routed(
    model_dir,
    routers_path,
    out_dir,
    tau: float,
    k_verify: int = 8,
    ffn_skipped: float | None = None,
) -> Path:
    """A model directory of the shipped policy with trained routers (a safetensors file
    `train` wrote) at threshold tau: the source's prefill lengths and exits, fp32.
    ffn_skipped: the fraction of FFNs skipped at tau (from `evaluate`), kept in card.json."""
    from safetensors.torch import load_file

    from rtinfer.model.directory import ModelDir

    src, out = Path(model_dir), Path(out_dir)
    md, ck = ModelDir.load(src), checkpoint.load(src / "policy")
    gated = GatedPolicy(ck.model)
    gated.routers.load_state_dict(load_file(str(routers_path)))
    prefixes = sorted(
        {
            g["k"]
            for g in md.manifest["graphs"]
            if "prefill" in g["roles"] and g["depth"] == ck.cfg.n_layer and g["dtype"] == "float32"
        }
    )
    _export_plain(routed_policy(gated, tau), ck.cfg, ck.vocab, out, k_verify, prefixes)
    for name in SPEC_FILES:
        shutil.copyfile(src / name, out / name)
    (out / "card.json").write_text(
        json.dumps(
            {
                "name": out.name,
                "from": src.name,
                "tau": tau,
                "routers": str(routers_path),
                "ffn_skipped": ffn_skipped,
            }
        )
    )
    return out


def _export_plain(policy: nn.Module, cfg, vocab, out: Path, k_verify: int, prefixes) -> None:
    """Every step graph of models.export's plan, fp32, and graphs.json, without renaming the
    initializers: models.export's renaming does not reach inside an If's branches (their
    nodes would name weights that no longer exist)."""
    import hashlib
    import warnings

    import onnx

    from models.export import OPSET, StepGraph, _io, graph_plan

    out.mkdir(parents=True, exist_ok=True)
    graphs = []
    for (depth, k), roles in graph_plan(cfg, k_verify, prefixes).items():
        path = out / f"step_d{depth}_k{k}.onnx"
        args = (
            torch.zeros(1, k, dtype=torch.int64),
            torch.zeros(1, dtype=torch.int64),
            torch.zeros(cfg.kv_shape(1)),
        )
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                StepGraph(policy, depth),
                args,
                str(path),
                opset_version=OPSET,
                input_names=["tokens", "start_pos", "kv"],
                output_names=["logits", "kv_out"],
                dynamo=False,
            )
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        graphs.append(
            {
                "file": path.name,
                "roles": roles,
                "depth": depth,
                "k": k,
                "dtype": "float32",
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                **_io(cfg, k, "float32"),
            }
        )
    manifest = {
        "format": "rtinfer-graphs",
        "version": 1,
        "opset": OPSET,
        "exporter": f"torch {torch.__version__} onnx legacy",
        "config": cfg.to_dict(),
        "vocab": vocab.to_dict(),
        "batch": 1,
        "kv_layout": ["layer", "k|v", "batch", "head", "position", "head_dim"],
        "graphs": graphs,
    }
    write_manifest(out, manifest)


GATED_BIN = "gated.bin"  # a shipped gated directory's tensors that weights.bin lacks


def gate_name(tau: float) -> str:
    """The level name a threshold ships under: 0.5 -> "gate50"."""
    return f"gate{round(tau * 100):02d}"


def ship_gated(model_dir, routers_path, out_dir, taus, levels: dict | None = None) -> Path:
    """A model directory serving the source's dense fp32 set (its files copied byte for byte:
    graphs, weights.bin, tokenizers, checkpoint, stream) plus one gated set per threshold,
    declared in graphs.json "gated" (docs/policies.md "Gated budget levels"): every
    full-depth k of the source, at tau, as step_d{L}_k{k}_{name}.onnx beside the dense ones.
    Their tensors point into the source's weights.bin where it holds them (so that file
    stays identical), others into gated.bin (deduplicated). levels: {tau: {"ffn_active",
    "step_ratio", "active_flops", "accuracy"}} measured (step_ratio defaults to 1.0, i.e.
    not cheaper, until measured). The routers are copied in as routers.safetensors."""
    import hashlib
    import warnings

    from safetensors.torch import load_file

    from models.export import OPSET, StepGraph
    from models.share import WEIGHTS, external_tensors, externalise

    src, out = Path(model_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(src)
    manifest["graphs"] = [g for g in manifest["graphs"] if g["dtype"] == "float32"]
    manifest["weights"] = {n: d for n, d in manifest.get("weights", {}).items() if n == WEIGHTS}
    manifest.pop("quantised", None)
    for f in src.iterdir():
        if f.is_file() and f.name not in (MANIFEST, "card.json"):
            shutil.copyfile(f, out / f.name)
    shutil.copyfile(routers_path, out / "routers.safetensors")
    ck = checkpoint.load(src / "policy")
    gated = GatedPolicy(ck.model)
    gated.routers.load_state_dict(load_file(str(routers_path)))
    full = ck.cfg.n_layer
    blob = (src / WEIGHTS).read_bytes() if WEIGHTS in manifest["weights"] else b""
    seen = external_tensors(out, [g["file"] for g in manifest["graphs"]], blob)
    extra, decl = bytearray(), []
    ks = sorted(g["k"] for g in manifest["graphs"] if g["depth"] == full)
    for tau in taus:
        name, policy = gate_name(tau), routed_policy(gated, tau)
        graphs = []
        for k in ks:
            path = out / f"step_d{full}_k{k}_{name}.onnx"
            args = (
                torch.zeros(1, k, dtype=torch.int64),
                torch.zeros(1, dtype=torch.int64),
                torch.zeros(ck.cfg.kv_shape(1)),
            )
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # initializer names kept: If branches use them
                torch.onnx.export(
                    StepGraph(policy, full),
                    args,
                    str(path),
                    opset_version=OPSET,
                    input_names=["tokens", "start_pos", "kv"],
                    output_names=["logits", "kv_out"],
                    dynamo=False,
                )
            model = onnx.load(str(path))
            onnx.checker.check_model(model, full_check=True)
            externalise(model, extra, seen, location=GATED_BIN)  # new tensors: gated.bin
            onnx.save_model(model, str(path))
            role = [
                r
                for g in manifest["graphs"]
                if g["depth"] == full and g["k"] == k
                for r in g["roles"]
            ]
            graphs.append(
                {
                    "file": path.name,
                    "roles": role,
                    "depth": full,
                    "k": k,
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                }
            )
        m = (levels or {}).get(tau, {})
        decl.append(
            {
                "name": name,
                "tau": tau,
                "dtype": "float32",
                "ffn_active": m.get("ffn_active", 1.0),
                "step_ratio": m.get("step_ratio", 1.0),
                "active_flops": m.get("active_flops"),
                "accuracy": m.get("accuracy"),
                "graphs": graphs,
            }
        )
    if extra:
        (out / GATED_BIN).write_bytes(bytes(extra))
        manifest["weights"][GATED_BIN] = hashlib.sha256(extra).hexdigest()
    manifest["gated"] = decl
    write_manifest(out, manifest)
    return out


def train(
    gated: GatedPolicy,
    demos,
    *,
    steps: int,
    batch: int,
    penalty: float,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Fit the routers; returns the loss per step."""
    v = demos.vocab
    a0, a1, t = v.action_start, v.action_stop, torch.from_numpy(demos.targets)
    opt = torch.optim.Adam(gated.routers.parameters(), lr=lr)
    rng, seqs, losses = np.random.default_rng(seed), torch.from_numpy(demos.seqs), []
    for _ in range(steps):
        rows = seqs[rng.integers(0, len(seqs), batch)]
        logits, s = gated(rows[:, :-1])
        ce = F.cross_entropy(
            logits[:, t, a0:a1].reshape(-1, a1 - a0), (rows[:, t + 1] - a0).reshape(-1)
        )
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
            rows = seqs[i : i + batch]
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
            out[key].update(
                agreement=agree / n,
                skipped=float(skipped.sum() / n / len(skipped)),
                per_layer_skipped=[round(float(x), 4) for x in skipped / n],
            )
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
    st.add_argument(
        "--shape",
        type=int,
        nargs=3,
        action="append",
        required=True,
        metavar=("N_LAYER", "N_EMBD", "N_HEAD"),
    )
    st.add_argument("--vocab-size", type=int, default=519)
    st.add_argument("--max-ctx", type=int, default=64)
    st.add_argument("--rounds", type=int, default=5)
    ex = sub.add_parser("export", help="a routed model directory at one threshold")
    ex.add_argument("model")
    ex.add_argument("routers", help="a routers .safetensors `train` wrote")
    ex.add_argument("out")
    ex.add_argument("--tau", type=float, required=True)
    ex.add_argument(
        "--ffn-skipped",
        type=float,
        default=None,
        help="the fraction of FFNs skipped at tau (train's results), for the card",
    )
    sh = sub.add_parser("ship", help="dense + a gated set per threshold, in one model directory")
    sh.add_argument("model")
    sh.add_argument("routers", help="a routers .safetensors `train` wrote")
    sh.add_argument("out")
    sh.add_argument("--tau", type=float, nargs="+", required=True)
    sh.add_argument(
        "--levels",
        default=None,
        help='JSON {"<tau>": {"ffn_active", "step_ratio", '
        '"active_flops", "accuracy"}} measured, for graphs.json "gated"',
    )
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
            print(
                json.dumps(step_times(tuple(shape), a.vocab_size, a.max_ctx, skips, a.rounds)),
                flush=True,
            )
        return 0
    if a.cmd == "export":
        print(export_routed(a.model, a.routers, a.out, a.tau, ffn_skipped=a.ffn_skipped))
        return 0
    if a.cmd == "ship":
        lv = json.loads(Path(a.levels).read_text()) if a.levels else {}
        print(ship_gated(a.model, a.routers, a.out, a.tau, {float(t): m for t, m in lv.items()}))
        return 0
    if a.cmd == "levels":
        print(json.dumps({n: str(p) for n, p in export_levels(a.model, a.out, a.skip).items()}))
        return 0
    import time

    from safetensors.torch import save_file

    from models import data

    torch.set_num_threads(1)
    if a.cmd == "finetune":
        card = finetune_level(
            a.model,
            a.out,
            a.skip,
            *data.split(data.load(a.data), 0.02, 0),
            steps=a.steps,
            batch=a.batch,
            lr=a.lr,
        )
        print(json.dumps({k: card[k] for k in ("name", "params", "accuracy")}))
        return 0
    tr_set, val = data.split(data.load(a.data), a.val, 0)
    results = {
        "data": a.data,
        "train_rows": len(tr_set),
        "val_rows": len(val),
        "steps": a.steps,
        "batch": a.batch,
        "runs": {},
    }
    for pen in a.penalty:
        gated = GatedPolicy(checkpoint.load(Path(a.model) / "policy").model)
        t0 = time.monotonic()
        losses = train(gated, tr_set, steps=a.steps, batch=a.batch, penalty=pen)
        results["runs"][f"{pen:g}"] = {
            "train_seconds": time.monotonic() - t0,
            "loss_first_last": [losses[0], losses[-1]],
            **evaluate(gated, val, a.taus),
        }
        save_file(
            {k: t.contiguous() for k, t in gated.routers.state_dict().items()},
            f"{a.out}-p{pen:g}.safetensors",
        )
        Path(f"{a.out}.json").write_text(json.dumps(results, indent=1))
        print(json.dumps({pen: results["runs"][f"{pen:g}"]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
