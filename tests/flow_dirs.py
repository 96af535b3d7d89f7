"""Tiny flow policy directories for the flow tests: models.flow_tiny's torch policy exported
looped and packaged with models.flow_package.package_flow (the real writer), and a variant
whose step graph returns NaN for an observation with state[0] > 1."""

from __future__ import annotations

import torch

from models.flow_package import package_flow
from models.flow_tiny import TinyFlow, export_looped
from rtinfer.model.action_spec import ActionSpec

SPEC = ActionSpec(
    ("a", "b"),
    ("m", "m"),
    (-50.0, -50.0),
    (50.0, 50.0),
    horizon=6,
    period_ns=50_000_000,
    start_ns=0,
)
AFFINE = {"scale": [2.0, 0.5], "offset": [0.1, -0.2]}
LADDER = [(10, 0), (4, 0), (2, 0), (1, 0)]


class NanFlow(TinyFlow):
    """cond's last value is state[0]; v gets 0 * sqrt(1 - it): NaN where state[0] > 1."""

    def prefix(self, state):
        return torch.cat([self.encoder(state)[:, :-1], state[:, :1]], 1)

    def velocity(self, cond, x_t, t):
        return super().velocity(cond, x_t, t) + 0.0 * torch.sqrt(1.0 - cond[:, -1:])[:, :, None]


def build(out, model: TinyFlow | None = None, *, levels=LADDER, affine=AFFINE, **kw):
    """Package `model` (default TinyFlow(horizon=8, dim=2)) into `out`; returns the model."""
    model = model or TinyFlow()
    graphs = out.parent / f".{out.name}-graphs"
    prefix, step = export_looped(model, graphs)
    package_flow(out, prefix, [step], levels, SPEC, affine=affine, **kw)
    return model
