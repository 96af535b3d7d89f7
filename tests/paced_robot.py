"""A simulated robot that observes its joints every `every` ticks, and a policy for it:
the parts of tests/test_overload_asks.py (real processes: `controllers.run --hardware
paced_robot:ObservingAxes`, the inference node serving the packaged policy)."""

from __future__ import annotations

import numpy as np

from controllers.hardware import Observation
from controllers.simulated import SimulatedAxes


class ObservingAxes(SimulatedAxes):
    def __init__(self, control, *, every: int = 10, ready_file: str = "", **kw):
        """every: ticks between observations; ready_file: created on the loop's first tick
        (the robot runs)."""
        super().__init__(control, **kw)
        self.every, self._ticks, self.ready_file = int(every), 0, ready_file

    def observe(self, state, now_ns: int) -> Observation | None:
        """Every `every` ticks: the joint positions as `q` (float32)."""
        if self.ready_file:
            open(self.ready_file, "w").close()
            self.ready_file = ""
        self._ticks += 1
        if self._ticks % self.every:
            return None
        return Observation(now_ns, {"q": state.pos.astype(np.float32)}, {})


def mlp_policy(dim: int, horizon: int, width: int = 1024, layers: int = 24):
    """A torch MLP q (1, dim) -> (1, horizon, dim) within +-0.2: `layers` of width x width
    (the defaults: some milliseconds a cycle on any CPU; the test times it)."""
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.inp = torch.nn.Linear(dim, width)
            self.body = torch.nn.Sequential(
                *[
                    torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                    for _ in range(layers)
                ]
            )
            self.out = torch.nn.Linear(width, horizon * dim)

        def forward(self, q):
            return 0.2 * torch.tanh(self.out(self.body(self.inp(q)))).view(1, horizon, dim)

    return Mlp().eval()
