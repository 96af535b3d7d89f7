"""A tiny flow-matching policy in torch (an MLP observation encoder and an MLP action expert
over the whole chunk), exported both ways rtinfer can serve a flow policy:

- looped: prefix.onnx (state -> "cond") and step.onnx ("cond", x_t, t -> v); the node
  integrates (rtinfer.inference.flow_runner), package with models.flow_package.package_flow;
- unrolled: one graph per step count K (state, noise -> x after K Euler steps), the loop
  baked in: what `rtinfer bench flow` compares the looped runner against.

Random weights unless trained; for tests, the doc's example and the bench. The time
convention is the contract's: t = 1 noise, t = 0 data, dt = -1/K.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

OPSET = 17


class TinyFlow(nn.Module):
    def __init__(
        self,
        obs_dim: int = 4,
        horizon: int = 8,
        dim: int = 2,
        width: int = 64,
        embed: int = 32,
        per_waypoint_t: bool = False,
        seed: int = 0,
    ):
        super().__init__()
        torch.manual_seed(seed)
        self.obs_dim, self.horizon, self.dim = obs_dim, horizon, dim
        self.per_waypoint_t = per_waypoint_t
        self.encoder = nn.Sequential(nn.Linear(obs_dim, embed), nn.GELU(), nn.Linear(embed, embed))
        t_dim = horizon if per_waypoint_t else 1
        self.expert = nn.Sequential(
            nn.Linear(horizon * dim + t_dim + embed, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, horizon * dim),
        )

    def prefix(self, state: torch.Tensor) -> torch.Tensor:
        """state [1, obs_dim] -> cond [1, embed]."""
        return self.encoder(state)

    def velocity(self, cond: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """cond [1, embed], x_t [1, H, D], t [1] or [1, H] -> v [1, H, D]."""
        feats = torch.cat([x_t.reshape(1, -1), t.reshape(1, -1), cond], dim=1)
        return self.expert(feats).reshape(1, self.horizon, self.dim)

    @torch.no_grad()
    def sample(self, state: torch.Tensor, noise: torch.Tensor, k: int) -> torch.Tensor:
        """x after K Euler steps from `noise` (the reference the runner must match)."""
        cond, x, dt = self.prefix(state), noise.clone(), -1.0 / k
        for i in range(k):
            t = torch.full((1, self.horizon) if self.per_waypoint_t else (1,), 1.0 + i * dt)
            x = x + dt * self.velocity(cond, x, t)
        return x


class _Prefix(nn.Module):
    def __init__(self, m: TinyFlow):
        super().__init__()
        self.m = m

    def forward(self, state):
        return self.m.prefix(state)


class _Step(nn.Module):
    def __init__(self, m: TinyFlow):
        super().__init__()
        self.m = m

    def forward(self, cond, x_t, t):
        return self.m.velocity(cond, x_t, t)


class _Unrolled(nn.Module):
    def __init__(self, m: TinyFlow, k: int):
        super().__init__()
        self.m, self.k = m, k

    def forward(self, state, noise):
        cond, x, dt = self.m.prefix(state), noise, -1.0 / self.k
        for i in range(self.k):
            shape = (1, self.m.horizon) if self.m.per_waypoint_t else (1,)
            x = x + dt * self.m.velocity(cond, x, torch.full(shape, 1.0 + i * dt))
        return x


def _export(module: nn.Module, args: tuple, path: Path, inputs: list, outputs: list) -> Path:
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            opset_version=OPSET,
            dynamo=False,
        )
    return path


def export_looped(m: TinyFlow, out_dir) -> tuple[Path, Path]:
    """prefix.onnx (input "state") and step.onnx ("cond", "x_t", "t" -> "v") in out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = torch.zeros(1, m.obs_dim)
    cond = m.prefix(state).detach()
    x = torch.zeros(1, m.horizon, m.dim)
    t = torch.ones((1, m.horizon) if m.per_waypoint_t else (1,))
    return (
        _export(_Prefix(m), (state,), out / "prefix.onnx", ["state"], ["cond"]),
        _export(_Step(m), (cond, x, t), out / "step.onnx", ["cond", "x_t", "t"], ["v"]),
    )


def export_unrolled(m: TinyFlow, k: int, path) -> Path:
    """One graph ("state", "noise" -> "x") with K Euler steps baked in."""
    args = (torch.zeros(1, m.obs_dim), torch.zeros(1, m.horizon, m.dim))
    return _export(_Unrolled(m, k), args, Path(path), ["state", "noise"], ["x"])
