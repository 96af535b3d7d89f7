"""A small flow-matching action expert, trained with training-time real-time chunking.

    python -m models.flow_train --help     # the conveyor cell's CLI is in
                                           # examples/conveyor_sorting/flow_policy.py

Model (`FlowNet`): an observation encoder (an MLP over a flat, normalised feature vector)
makes P prefix tokens once per cycle; the step network is a pre-LN transformer over
[P prefix tokens][H waypoint tokens] (each waypoint token: its noisy action, its own flow
time and its position) that returns the velocity of every waypoint.

Flow matching as LeRobot's SmolVLA / pi0: t = 1 is noise, t = 0 is data,
x_t = t * noise + (1 - t) * x, target v = noise - x; t drawn from Beta(1.5, 1) (more weight
near the noise end), inference integrates K Euler steps from t = 1 with dt = -1/K.

Training-time RTC (arXiv 2512.05964): with probability `rtc_prob` a sample is conditioned on
a committed prefix of d waypoints (d uniform in 1..max_committed): they are given clean,
with per-waypoint time 0, and the loss is taken on the rest only. The step graph therefore
takes "t" of shape [1, H]; a waypoint at t = 0 gets velocity 0, so a committed prefix comes
out of the integration exactly as it went in.

Anchored coordinates. Actions are learnt relative to an anchor the prefix computes from the
observation (for the conveyor: the cup's position), y_rel = y - anchor, in a normalised space
y = (a - offset) / scale. The step graph works in absolute y and converts exactly:
x_rel = x_t - (1 - t) * anchor, v = v_rel - anchor (Euler in y is then Euler in y_rel), so the
node's affine (physical = y * scale + offset) stays a constant.

One-step level: reflow distillation (one-step, as InstaFlow's distillation stage): a
copy of the step network is trained so that one Euler step from the same noise lands
where the 10-step teacher's integration lands (the same committed prefix too).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

OPSET = 17


@dataclass(frozen=True)
class FlowConfig:
    cond_dim: int  # flat observation features
    horizon: int = 16  # H waypoints
    action_dim: int = 4  # D
    prefix_tokens: int = 4  # P
    width: int = 64  # E
    layers: int = 4
    heads: int = 4
    ff: int = 256
    enc_hidden: int = 256
    max_committed: int = 8  # largest committed prefix trained on (waypoints)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of flow times t (..., ) in [0, 1] -> (..., dim)."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(1000.0) / half))
    ang = t.unsqueeze(-1) * 1000.0 * freqs
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class Block(nn.Module):
    """Pre-LN transformer block, attention written out (exports to plain ONNX ops)."""

    def __init__(self, e: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(e), nn.LayerNorm(e)
        self.qkv, self.proj = nn.Linear(e, 3 * e), nn.Linear(e, e)
        self.mlp = nn.Sequential(nn.Linear(e, ff), nn.GELU(), nn.Linear(ff, e))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, e = x.shape
        h = self.heads
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, h, e // h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(e // h)), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, e))
        return x + self.mlp(self.n2(x))


class FlowNet(nn.Module):
    """encode(cond (B, C)) -> prefix tokens (B, P, E);
    velocity(prefix, x_rel (B, H, D), t (B, H)) -> v_rel (B, H, D) (anchored coordinates)."""

    def __init__(self, cfg: FlowConfig):
        super().__init__()
        self.cfg = c = cfg
        self.encoder = nn.Sequential(
            nn.Linear(c.cond_dim, c.enc_hidden),
            nn.GELU(),
            nn.Linear(c.enc_hidden, c.enc_hidden),
            nn.GELU(),
            nn.Linear(c.enc_hidden, c.prefix_tokens * c.width),
        )
        self.prefix_pos = nn.Parameter(torch.zeros(c.prefix_tokens, c.width))
        self.act_in = nn.Linear(c.action_dim, c.width)
        self.act_pos = nn.Parameter(torch.randn(c.horizon, c.width) * 0.02)
        self.t_mlp = nn.Sequential(
            nn.Linear(c.width, c.width), nn.GELU(), nn.Linear(c.width, c.width)
        )
        self.blocks = nn.ModuleList(Block(c.width, c.heads, c.ff) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.width)
        self.out = nn.Linear(c.width, c.action_dim)

    def encode(self, cond: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        return self.encoder(cond).reshape(-1, c.prefix_tokens, c.width) + self.prefix_pos

    def velocity(self, prefix: torch.Tensor, x_rel: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.act_in(x_rel) + self.act_pos + self.t_mlp(time_embedding(t, self.cfg.width))
        z = torch.cat([prefix, a], dim=1)
        for blk in self.blocks:
            z = blk(z)
        return self.out(self.norm(z[:, prefix.shape[1] :]))

    def step(self, prefix, anchor, x_t, t):
        """The step graph's maths in absolute normalised coordinates: v for x_t at per-waypoint
        times t (B, H); waypoints at t = 0 (committed) get v = 0."""
        tt = t.unsqueeze(-1)
        v = self.velocity(prefix, x_t - (1.0 - tt) * anchor, t) - anchor
        return v * (tt > 0).to(v.dtype)


def sample_times(b: int, gen: torch.Generator) -> torch.Tensor:
    """pi0's flow-time draw: Beta(1.5, 1) * 0.999 + 0.001 (weighted toward the noise end);
    Beta(a, 1) is U ** (1 / a)."""
    return torch.rand(b, generator=gen) ** (1.0 / 1.5) * 0.999 + 0.001


def committed_mask(
    b: int, h: int, max_committed: int, prob: float, gen: torch.Generator
) -> torch.Tensor:
    """(B, H) bool: True for a committed waypoint. A sample is conditioned with probability
    `prob`, on d uniform in 1..max_committed leading waypoints."""
    d = torch.randint(1, max_committed + 1, (b,), generator=gen)
    d = torch.where(torch.rand(b, generator=gen) < prob, d, torch.zeros_like(d))
    return torch.arange(h)[None, :] < d[:, None]


def flow_loss(
    net: FlowNet, cond, y_rel, gen: torch.Generator, *, rtc_prob: float = 0.5
) -> torch.Tensor:
    """Flow-matching loss on a batch in anchored coordinates, with training-time RTC."""
    b, h, _ = y_rel.shape
    noise = torch.randn(y_rel.shape, generator=gen)
    t = sample_times(b, gen)[:, None].expand(b, h)
    done = committed_mask(b, h, net.cfg.max_committed, rtc_prob, gen)
    t = torch.where(done, torch.zeros_like(t), t)
    tt = t.unsqueeze(-1)
    x_t = tt * noise + (1.0 - tt) * y_rel
    v = net.velocity(net.encode(cond), x_t, t)
    w = (~done).unsqueeze(-1).float()
    return (((v - (noise - y_rel)) ** 2) * w).sum() / (w.sum() * y_rel.shape[-1])


@torch.no_grad()
def integrate(net: FlowNet, prefix, anchor, noise, steps: int, committed=None, n_committed=None):
    """K Euler steps from noise (t = 1) to t = 0 through `net.step`, as the node integrates.
    committed: (B, H, D) values whose first n_committed[b] waypoints are held (t = 0)."""
    b, h, _ = noise.shape
    x = noise.clone()
    done = torch.zeros(b, h, dtype=torch.bool)
    if committed is not None:
        done = torch.arange(h)[None, :] < n_committed[:, None]
        x = torch.where(done.unsqueeze(-1), committed, x)
    for k in range(steps):
        tk = torch.full((b, h), 1.0 - k / steps)
        t = torch.where(done, torch.zeros_like(tk), tk)
        x = x - (1.0 / steps) * net.step(prefix, anchor, x, t)
    return x


def _schedule(opt, steps: int, lr: float):
    return torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.05, anneal_strategy="cos"
    )


def train_flow(
    net: FlowNet,
    cond: torch.Tensor,
    y_rel: torch.Tensor,
    *,
    steps: int,
    batch: int = 256,
    lr: float = 5e-4,
    seed: int = 0,
    rtc_prob: float = 0.5,
    log_every: int = 200,
    log=print,
) -> list[dict]:
    """Train `net` on (cond (N, C), y_rel (N, H, D)) rows; returns the loss history."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    sched = _schedule(opt, steps, lr)
    net.train()
    hist, t0, run = [], time.perf_counter(), 0.0
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(cond), (batch,), generator=gen)
        loss = flow_loss(net, cond[idx], y_rel[idx], gen, rtc_prob=rtc_prob)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        run = loss.item() if step == 1 else 0.98 * run + 0.02 * loss.item()
        if step % log_every == 0 or step == steps:
            hist.append(
                {"step": step, "loss": round(run, 5), "s": round(time.perf_counter() - t0, 1)}
            )
            log(json.dumps(hist[-1]))
    net.eval()
    return hist


def distill_one_step(
    teacher: FlowNet,
    cond: torch.Tensor,
    *,
    steps: int,
    teacher_steps: int = 10,
    y_rel: torch.Tensor | None = None,
    batch: int = 256,
    lr: float = 2e-4,
    seed: int = 1,
    rtc_prob: float = 0.5,
    log_every: int = 200,
    log=print,
    student_prefix: str = "own",
) -> tuple[FlowNet, list[dict]]:
    """Reflow distillation to one step: a copy of `teacher` learns v(noise, t=1) so that
    noise - v equals the teacher's `teacher_steps`-step Euler result from the same noise (and
    the same committed prefix, drawn as in training: the rows' own chunks y_rel where given,
    else the teacher's unconditioned result, which costs a second integration).
    student_prefix "own": the student's copy of the encoder trains along (the package ships
    the teacher's prefix graph, so the served one-step level reads the teacher's tokens);
    "teacher": the student reads the teacher's prefix tokens and only its step network learns
    (conveyor-flow measured 0.976 with "own", 0.956 with "teacher", 60 episodes each)."""
    import copy

    student = copy.deepcopy(teacher)
    teacher.eval()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(student.parameters(), lr=lr, weight_decay=1e-4)
    sched = _schedule(opt, steps, lr)
    h, zero = teacher.cfg.horizon, None
    hist, t0, run = [], time.perf_counter(), 0.0
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(cond), (batch,), generator=gen)
        c = cond[idx]
        noise = torch.randn(batch, h, teacher.cfg.action_dim, generator=gen)
        zero = torch.zeros_like(noise) if zero is None else zero
        with torch.no_grad():
            pre = teacher.encode(c)
            free = (
                integrate(teacher, pre, zero, noise, teacher_steps) if y_rel is None else y_rel[idx]
            )
            done = committed_mask(batch, h, teacher.cfg.max_committed, rtc_prob, gen)
            n = done.sum(1)
            target = integrate(
                teacher, pre, zero, noise, teacher_steps, committed=free, n_committed=n
            )
        student.train()
        x0 = torch.where(done.unsqueeze(-1), free, noise)
        t = torch.where(done, torch.zeros(batch, h), torch.ones(batch, h))
        sp = pre if student_prefix == "teacher" else student.encode(c)
        pred = x0 - student.step(sp, zero, x0, t)
        w = (~done).unsqueeze(-1).float()
        loss = (((pred - target) ** 2) * w).sum() / (w.sum() * noise.shape[-1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        sched.step()
        run = loss.item() if step == 1 else 0.98 * run + 0.02 * loss.item()
        if step % log_every == 0 or step == steps:
            hist.append(
                {"step": step, "loss": round(run, 6), "s": round(time.perf_counter() - t0, 1)}
            )
            log(json.dumps(hist[-1]))
    student.eval()
    return student, hist


# -- checkpoints and export -------------------------------------------------------------------
def save(net: FlowNet, path, extra: dict | None = None) -> None:
    torch.save({"config": asdict(net.cfg), "state": net.state_dict(), "extra": extra or {}}, path)


def load(path) -> tuple[FlowNet, dict]:
    ck = torch.load(path, map_location="cpu", weights_only=True)
    net = FlowNet(FlowConfig(**ck["config"]))
    net.load_state_dict(ck["state"])
    return net.eval(), ck.get("extra", {})


class StepGraph(nn.Module):
    """(obs_emb (1, P, E), anchor (1, H, D), x_t (1, H, D), t (1, H)) -> v (1, H, D)."""

    def __init__(self, net: FlowNet):
        super().__init__()
        self.net = net

    def forward(self, obs_emb, anchor, x_t, t):
        return self.net.step(obs_emb, anchor, x_t, t)


def export_step(net: FlowNet, path, prefix_names=("obs_emb", "anchor")) -> None:
    """The step graph as ONNX (opset 17, static shapes, batch 1)."""
    c = net.cfg
    dummy = (
        torch.zeros(1, c.prefix_tokens, c.width),
        torch.zeros(1, c.horizon, c.action_dim),
        torch.zeros(1, c.horizon, c.action_dim),
        torch.full((1, c.horizon), 0.5),
    )
    with torch.no_grad():
        torch.onnx.export(
            StepGraph(net).eval(),
            dummy,
            str(path),
            input_names=[*prefix_names, "x_t", "t"],
            output_names=["v"],
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
        )


def ort_session(path, threads: int = 1):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def euler_onnx(
    step_sess,
    prefix: dict[str, np.ndarray],
    noise: np.ndarray,
    steps: int,
    committed: np.ndarray | None = None,
    n_committed: int = 0,
) -> np.ndarray:
    """K Euler steps through an ONNX step graph (batch 1), as the node integrates."""
    x = noise.astype(np.float32).copy()
    h = x.shape[1]
    if n_committed:
        x[:, :n_committed] = committed[:, :n_committed]
    for k in range(steps):
        t = np.full((1, h), 1.0 - k / steps, np.float32)
        t[:, :n_committed] = 0.0
        v = step_sess.run(["v"], {**prefix, "x_t": x, "t": t})[0]
        x = x - np.float32(1.0 / steps) * v
    return x
