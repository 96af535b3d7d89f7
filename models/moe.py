"""Sparse mixture-of-experts FFN (Switch-style top-1) for the policy, sparse-upcycled.

Every block's FFN becomes E experts (each a dense FFN of the original width) behind a
router, a Linear(C, E) on the FFN's input ln_2(x). A token goes to argmax of its own router
logits: its route depends on that token alone, so a 1-token step and a k-token verify route
it the same way and speculative greedy stays equal to plain greedy (causal routing, no
capacity shared across tokens, nothing dropped). Top-1, not top-2: the active FFN per token
is then exactly one dense FFN, so the MoE's active parameters are the dense policy's, and
the decode step reads one expert's weights.

The expert output is scaled by p / stop_grad(p) (p: the chosen expert's softmax
probability): 1.0 in value, so upcycling (every expert a copy of the dense FFN, a new
router) starts as the dense function and a deployed graph needs no gate multiply,
while the router still gets Switch's gradient through p. The Switch load-balancing loss,
E * sum_e f_e * P_e (1.0 when balanced), is added to the gradients inside the module
(`AuxLoss`), so models.train.fit trains an MoE policy as it is (teacher, exits, balance).

Static-shape export: a 1-token graph Gathers the chosen expert's weights (mode "gather")
or runs each expert in an ONNX If (mode "if"); a k-token graph computes every expert over
the k tokens and picks each token's row (exact: a gather, no arithmetic on the others).

    python -m models.moe train models/zoo/conveyor-v1/policy OUT/moe --kind moe --experts 4 \
        --data <the card's training.data> --teacher models/zoo/conveyor-v1/policy
    python -m models.moe train ... OUT/wide --kind wide --experts 4   # equal-total baseline
    python -m models.moe package OUT/moe models/zoo/conveyor-v1-moe
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from models.checkpoint import untransposed
from models.config import PolicyConfig, Vocab
from models.policy import Policy

FORMAT = "rtinfer-policy-ffn"  # a Policy whose FFNs are MoE or wider (this module's kinds)


class AuxLoss(torch.autograd.Function):
    """y = x in value; backward adds d(weight * aux)/d(aux) = weight to aux's gradient, so a
    loss term computed inside a module reaches the optimiser without the caller seeing it."""

    @staticmethod
    def forward(ctx, x, aux, weight: float):
        ctx.weight = weight
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, torch.full((), ctx.weight, device=grad.device, dtype=grad.dtype), None


def balance_loss(logits: torch.Tensor, route: torch.Tensor, n_expert: int) -> torch.Tensor:
    """Switch Transformer load-balancing loss over all tokens: E * sum_e f_e * P_e, with
    f_e the fraction of tokens routed to e and P_e the mean router probability of e.
    1.0 when routes and probabilities are uniform; E when every token picks one expert."""
    probs = F.softmax(logits.float(), -1).reshape(-1, n_expert)
    f = F.one_hot(route.reshape(-1), n_expert).float().mean(0)
    return n_expert * (f * probs.mean(0)).sum()


def _ffn(h, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(h, w1, b1)), w2, b2)


def _expert_if4(h: torch.Tensor, e: torch.Tensor, w: list[torch.Tensor]) -> torch.Tensor:
    """One token's FFN by its expert e (0-d int64) of four: nested ONNX Ifs when exported,
    so only the chosen expert's MatMuls run. w: the experts' (w1, b1, w2, b2), flat."""
    i = int(e)
    if i == 0:
        return F.linear(F.gelu(F.linear(h, w[0], w[1])), w[2], w[3])
    elif i == 1:
        return F.linear(F.gelu(F.linear(h, w[4], w[5])), w[6], w[7])
    elif i == 2:
        return F.linear(F.gelu(F.linear(h, w[8], w[9])), w[10], w[11])
    return F.linear(F.gelu(F.linear(h, w[12], w[13])), w[14], w[15])


@functools.cache
def _scripted_if4():
    """_expert_if4 scripted (its Ifs survive export), on first use only."""
    return torch.jit.script(_expert_if4)


class MoEMLP(nn.Module):
    """E experts of a dense MLP's shape and a top-1 router; drop-in for Block.mlp.

    w_fc (E, 4C, C), b_fc (E, 4C), w_proj (E, C, 4C), b_proj (E, C): nn.Linear layouts
    stacked. `last` holds the most recent forward's routes and balance loss (detached), for
    logs and tests; in training the balance loss times `aux_weight` joins the gradients."""

    def __init__(
        self,
        n_embd: int,
        n_expert: int,
        hidden: int | None = None,
        aux_weight: float = 0.01,
        mode: str = "gather",
    ):
        super().__init__()
        if mode not in ("gather", "if"):
            raise ValueError(f"mode {mode!r}: gather or if")
        H = hidden or 4 * n_embd
        self.n_expert, self.aux_weight, self.mode = n_expert, aux_weight, mode
        self.router = nn.Linear(n_embd, n_expert, bias=False)
        self.w_fc = nn.Parameter(torch.empty(n_expert, H, n_embd))
        self.b_fc = nn.Parameter(torch.zeros(n_expert, H))
        self.w_proj = nn.Parameter(torch.empty(n_expert, n_embd, H))
        self.b_proj = nn.Parameter(torch.zeros(n_expert, n_embd))
        for w in (self.w_fc, self.w_proj, self.router.weight):
            nn.init.normal_(w, std=0.02)
        self.last: dict = {}

    @classmethod
    def upcycled(cls, mlp: nn.Module, n_expert: int, **kw) -> MoEMLP:
        """Every expert a copy of `mlp` (a models.policy.MLP), the router new (normal, std
        0.02): the MoE computes mlp's function (to float rounding), whatever the routes,
        until trained (Komatsuzaki et al. 2022)."""
        H, C = mlp.c_fc.weight.shape
        moe = cls(C, n_expert, H, **kw)
        with torch.no_grad():
            for dst, src in (
                (moe.w_fc, mlp.c_fc.weight),
                (moe.b_fc, mlp.c_fc.bias),
                (moe.w_proj, mlp.c_proj.weight),
                (moe.b_proj, mlp.c_proj.bias),
            ):
                dst.copy_(src.expand_as(dst))
        return moe.to(mlp.c_fc.weight.dtype)

    def _expert(self, x, e: int):
        return _ffn(x, self.w_fc[e], self.b_fc[e], self.w_proj[e], self.b_proj[e])

    def forward(self, h):
        logits = self.router(h)  # (B, T, E)
        route = logits.argmax(-1)  # (B, T): the token's own
        if self.training:
            return self._train(h, logits, route)
        self.last = {"route": route.detach()}
        # Transposed once (a constant in the graph), shared by the 1-token and k-token
        # graphs so that weights.bin holds each expert's weights once.
        w1, w2 = self.w_fc.transpose(1, 2), self.w_proj.transpose(1, 2)  # (E,C,H), (E,H,C)
        B, T, C = h.shape
        if T == 1:  # a trace-time constant: the 1-token graph reads one expert
            return self._one_token(h, route, w1, w2)
        x = F.gelu(h.reshape(1, B * T, C) @ w1 + self.b_fc[:, None])  # (E, BT, H)
        every = x @ w2 + self.b_proj[:, None]  # (E, BT, C)
        pick = route.reshape(1, B * T, 1).expand(1, B * T, C)
        return every.gather(0, pick).reshape(B, T, C)

    def _one_token(self, h, route, w1, w2):
        if self.mode == "if" and h.shape[0] == 1 and self.n_expert == 4:
            # per-expert slices outside the Ifs: constants, folded when the session loads
            w = [t[e] for e in range(4) for t in (self.w_fc, self.b_fc, self.w_proj, self.b_proj)]
            return _scripted_if4()(h, route.reshape(()), w)
        e = route.reshape(-1)  # (B,)
        x = F.gelu(h @ w1.index_select(0, e) + self.b_fc.index_select(0, e)[:, None])
        return x @ w2.index_select(0, e) + self.b_proj.index_select(0, e)[:, None]

    def _train(self, h, logits, route):
        """Sparse dispatch: each expert runs on its own tokens only (one FFN of compute)."""
        B, T, C = h.shape
        flat, r = h.reshape(-1, C), route.reshape(-1)
        p = F.softmax(logits.float(), -1).reshape(-1, self.n_expert)
        p_sel = p.gather(1, r[:, None])
        gate = (p_sel / p_sel.detach()).to(h.dtype)  # 1.0, with p's gradient
        out = torch.zeros_like(flat)
        for e in range(self.n_expert):
            idx = (r == e).nonzero().reshape(-1)
            if idx.numel():
                out = out.index_add(0, idx, self._expert(flat.index_select(0, idx), e))
        aux = balance_loss(logits, route, self.n_expert)
        self.last = {"route": route.detach(), "aux": float(aux.detach())}
        return AuxLoss.apply((out * gate).reshape(B, T, C), aux, self.aux_weight)


class WideMLP(nn.Module):
    """A dense MLP `factor` times wider (the equal-total-parameters baseline)."""

    def __init__(self, n_embd: int, hidden: int):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, hidden)
        self.c_proj = nn.Linear(hidden, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))

    @classmethod
    @torch.no_grad()
    def grown(cls, mlp: nn.Module, factor: int, noise: float = 0.1, seed: int = 0) -> WideMLP:
        """mlp's function with every hidden unit copied `factor` times: c_fc rows copied,
        c_proj columns split into parts summing to the original (w / factor + noise, the
        noise summing to zero over the copies, so their gradients differ: equal copies
        would stay equal for ever)."""
        H, C = mlp.c_fc.weight.shape
        wide = cls(C, factor * H)
        g = torch.Generator().manual_seed(seed)
        w2 = mlp.c_proj.weight
        n = torch.randn((factor, *w2.shape), generator=g, dtype=w2.dtype) * noise * w2.std()
        n = n - n.mean(0)
        wide.c_fc.weight.copy_(mlp.c_fc.weight.repeat(factor, 1))
        wide.c_fc.bias.copy_(mlp.c_fc.bias.repeat(factor))
        wide.c_proj.weight.copy_(torch.cat([w2 / factor + n[i] for i in range(factor)], 1))
        wide.c_proj.bias.copy_(mlp.c_proj.bias)
        return wide.to(w2.dtype)


def upcycle(
    policy: Policy, n_expert: int, aux_weight: float = 0.01, mode: str = "gather", seed: int = 0
) -> Policy:
    """A copy of `policy` with every FFN an upcycled MoEMLP (same function until trained)."""
    out = copy.deepcopy(policy)
    torch.manual_seed(seed)  # the routers' init
    for b in out.blocks:
        b.mlp = MoEMLP.upcycled(b.mlp, n_expert, aux_weight=aux_weight, mode=mode)
    return out


def widen_ffn(policy: Policy, factor: int, noise: float = 0.1, seed: int = 0) -> Policy:
    """A copy of `policy` whose FFNs are `factor` times wider, computing its function."""
    out = copy.deepcopy(policy)
    for i, b in enumerate(out.blocks):
        b.mlp = WideMLP.grown(b.mlp, factor, noise, seed + i)
    return out


def set_mode(policy: Policy, mode: str) -> Policy:
    """Choose how the MoE's 1-token graphs pick their expert ("gather" or "if")."""
    for b in policy.blocks:
        if isinstance(b.mlp, MoEMLP):
            b.mlp.mode = mode
    return policy


def ffn_kind(policy: Policy) -> dict:
    """{"kind": "moe", "n_expert": E} | {"kind": "wide", "factor": f} | {"kind": "dense"}."""
    m = policy.blocks[0].mlp
    if isinstance(m, MoEMLP):
        return {"kind": "moe", "n_expert": m.n_expert, "aux_weight": m.aux_weight}
    if isinstance(m, WideMLP):
        return {"kind": "wide", "factor": m.c_fc.out_features // (4 * policy.cfg.n_embd)}
    return {"kind": "dense"}


def active_params(policy: Policy) -> int:
    """Parameters a token's forward touches: every MoE layer counts its router and one
    expert (the other experts' weights are not read in the 1-token step)."""
    total = sum(p.numel() for p in policy.parameters())
    for b in policy.blocks:
        if isinstance(b.mlp, MoEMLP):
            m = b.mlp
            expert = sum(t[0].numel() for t in (m.w_fc, m.b_fc, m.w_proj, m.b_proj))
            total -= (m.n_expert - 1) * expert
    return total


@torch.no_grad()
def route_fractions(policy: Policy, seqs: torch.Tensor, batch: int = 256) -> list[list[float]]:
    """Per MoE layer, the fraction of tokens (every position of `seqs`, (N, T) vocab ids)
    routed to each expert; the policy is left in eval mode."""
    policy.eval()
    counts = None
    for i in range(0, len(seqs), batch):
        policy(seqs[i : i + batch])
        r = [
            F.one_hot(b.mlp.last["route"].reshape(-1), b.mlp.n_expert).sum(0)
            for b in policy.blocks
            if isinstance(b.mlp, MoEMLP)
        ]
        counts = torch.stack(r) if counts is None else counts + torch.stack(r)
    return [[round(float(x), 4) for x in row / row.sum()] for row in counts]


def save(path, policy: Policy, vocab: Vocab | None, meta: dict | None = None) -> Path:
    """`<stem>.safetensors` + `<stem>.json` (the config, FFN kind, vocab and meta); no pickle."""
    stem = Path(path)
    stem.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous() for k, v in policy.state_dict().items()},
        str(stem.with_suffix(".safetensors")),
        metadata={"format": FORMAT},
    )
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "format": FORMAT,
                "config": policy.cfg.to_dict(),
                "ffn": ffn_kind(policy),
                "vocab": vocab.to_dict() if vocab else None,
                "meta": meta or {},
            },
            indent=1,
        )
    )
    return stem.with_suffix(".safetensors")


def load(path) -> tuple[Policy, Vocab | None, dict]:
    """(policy in eval mode, vocab, the sidecar) of what `save` wrote."""
    stem = Path(path)
    info = json.loads(stem.with_suffix(".json").read_text())
    if info.get("format") != FORMAT:
        raise ValueError(f"{stem}.json: not a {FORMAT} sidecar (a plain Policy: models.checkpoint)")
    policy, ffn = Policy(PolicyConfig.from_dict(info["config"])), info["ffn"]
    if ffn["kind"] == "moe":
        policy = upcycle(policy, ffn["n_expert"], ffn.get("aux_weight", 0.01))
    elif ffn["kind"] == "wide":
        policy = widen_ffn(policy, ffn["factor"])
    state = untransposed(load_file(str(stem.with_suffix(".safetensors"))), policy.state_dict())
    policy.load_state_dict(state, strict=True)
    vocab = Vocab.from_dict(info["vocab"]) if info.get("vocab") else None
    return policy.eval(), vocab, info


def finetune(
    policy: Policy,
    data_paths,
    teacher_path,
    *,
    steps: int,
    batch: int,
    lr: float,
    distill: str = "logits",
    distill_weight: float = 0.5,
    seed: int = 0,
    desc: str = "moe",
) -> dict:
    """models.train.fit on the data (instruction-balanced, every exit) with the teacher;
    returns the training record (the log, seconds, token accuracy and teacher agreement on
    the 5 % validation split). The policy is trained in place."""
    from models import checkpoint
    from models.data import load as load_data
    from models.data import split
    from models.train import Teacher, evaluate_tokens, fit, teacher_agreement

    demos = load_data(list(data_paths))
    train, val = split(demos, 0.05, seed)
    teacher = Teacher(checkpoint.load(teacher_path).model, distill, distill_weight)
    for p in policy.parameters():
        p.requires_grad_(True)
    log, seconds = fit(
        policy, train, steps=steps, batch=batch, lr=lr, seed=seed, desc=desc, teacher=teacher
    )
    policy.eval()
    acc = evaluate_tokens(policy, val)
    agree = teacher_agreement(policy, teacher.model, val)
    routes = (
        route_fractions(policy, torch.from_numpy(val.seqs[:1024, :-1]))
        if ffn_kind(policy)["kind"] == "moe"
        else None
    )
    return {
        "data": [str(d) for d in data_paths],
        "train_rows": len(train),
        "val_rows": len(val),
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seed": seed,
        "teacher": str(teacher_path),
        "distill": distill,
        "distill_weight": distill_weight,
        "train_seconds": seconds,
        "val_token_accuracy": {str(d): round(a, 4) for d, a in acc.items()},
        "val_teacher_agreement": {str(d): round(a, 4) for d, a in agree.items()},
        "val_route_fractions": routes,
        "log": log,
        "tokenizer_config": demos.tokenizer_config,
        "obs_tokens_spec": demos.obs_tokens_spec,
        "vocab": demos.vocab.to_dict(),
    }


SPEC_FILES = ("tokenizer.json", "obs_tokens.json", "stream.npz")


def package_dir(policy: Policy, vocab: Vocab, record: dict, src_dir, out_dir) -> dict:
    """A model directory of `policy` (fp32 only): the source directory's graph plan (its
    prefill lengths, exits, exit prefills, k_verify 8) through models.export, weights shared
    in one weights.bin, the source's tokenizer, observation spec and stream, the checkpoint
    as moe.safetensors/.json (this module's format; `load` reads it) and card.json (training
    record, parameters total and active, parity). Returns the card."""
    import shutil

    from models.export import export_all
    from models.share import share_weights
    from rtinfer.model.directory import ModelDir

    src, out = Path(src_dir), Path(out_dir)
    md, cfg = ModelDir.load(src), policy.cfg
    fp32 = [g for g in md.manifest["graphs"] if g["dtype"] == "float32"]
    full = [g["k"] for g in fp32 if "prefill" in g["roles"] and g["depth"] == cfg.n_layer]
    exit_prefills = [
        (g["depth"], g["k"]) for g in fp32 if "prefill" in g["roles"] and g["depth"] < cfg.n_layer
    ]
    parity = export_all(
        policy.eval(),
        cfg,
        out,
        k_verify=8,
        prefix_len=sorted(full),
        vocab=vocab,
        fp16=False,
        exit_prefills=exit_prefills,
    )
    sizes = share_weights(out)
    for name in SPEC_FILES:
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
    keep = {
        k: v for k, v in record.items() if k not in ("tokenizer_config", "obs_tokens_spec", "vocab")
    }
    save(out / "moe", policy, vocab, keep)
    total, active = sum(p.numel() for p in policy.parameters()), active_params(policy)
    ffn = ffn_kind(policy)
    if ffn["kind"] == "moe":
        ffn.update(
            top_k=1,
            active_ffn_fraction=1 / ffn["n_expert"],
            routing="argmax of a per-layer Linear(C, E) on ln_2(x), per token "
            "(causal: a token's route depends on it alone)",
            one_token_step="Gather of the chosen expert's weights",
            k_token_step="every expert over the k tokens, each token's row picked",
        )
    card = {
        "name": out.name,
        "from": src.name,
        "params": total,
        "active_params": active,
        "ffn": ffn,
        "config": cfg.to_dict(),
        "files": sizes,
        "training": {k: v for k, v in keep.items() if k != "log"},
        "val_token_accuracy": record.get("val_token_accuracy"),
        "parity": {
            "greedy_tokens_identical": {"float32": parity["greedy_float32"]["match"]},
            "max_logit_diff": {n: g.get("max_abs_logits") for n, g in parity["graphs"].items()},
        },
    }
    (out / "card.json").write_text(json.dumps(card, indent=1))
    return card


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["train", "package"])
    ap.add_argument(
        "init",
        help="train: a models.checkpoint Policy (the shipped dense "
        "policy); package: a checkpoint stem `train` wrote",
    )
    ap.add_argument(
        "out",
        help="train: checkpoint stem of the result (+ .safetensors, "
        ".json); package: the model directory",
    )
    ap.add_argument(
        "--source",
        default="models/zoo/conveyor-v1",
        help="package: the model directory whose graph plan and tokenizers to use",
    )
    ap.add_argument("--kind", choices=["moe", "wide", "dense"], default="moe")
    ap.add_argument("--experts", type=int, default=4, help="MoE experts; wide: FFN factor")
    ap.add_argument("--aux-weight", type=float, default=0.01)
    ap.add_argument("--data", nargs="+")
    ap.add_argument("--teacher")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from models import checkpoint

    torch.set_num_threads(1)
    if a.cmd == "package":
        policy, vocab, info = load(a.init)
        card = package_dir(policy, vocab, info["meta"], a.source, a.out)
        print(json.dumps({k: card[k] for k in ("name", "params", "active_params", "parity")}))
        return 0
    if not (a.data and a.teacher):
        ap.error("train needs --data and --teacher")
    ck = checkpoint.load(a.init)
    policy = {
        "moe": lambda m: upcycle(m, a.experts, a.aux_weight, seed=a.seed),
        "wide": lambda m: widen_ffn(m, a.experts, seed=a.seed),
        "dense": lambda m: copy.deepcopy(m),
    }[a.kind](ck.model)
    record = finetune(
        policy, a.data, a.teacher, steps=a.steps, batch=a.batch, lr=a.lr, seed=a.seed, desc=a.kind
    )
    record.update(
        init=a.init,
        params=sum(p.numel() for p in policy.parameters()),
        active_params=active_params(policy),
    )
    save(a.out, policy, ck.vocab, record)
    print(
        json.dumps(
            {
                k: record[k]
                for k in (
                    "params",
                    "active_params",
                    "train_seconds",
                    "val_token_accuracy",
                    "val_teacher_agreement",
                )
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
