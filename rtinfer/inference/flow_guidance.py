"""RTC guidance for a flow policy (inference-time real-time chunking, arXiv 2506.07339), as
LeRobot 0.4.4's lerobot/policies/rtc does it, on a FlowRunner's graphs and buffers.

Each Euler step at time t (1 noise, 0 data) takes the step's velocity v and bends it toward
the previous chunk's left-over Y (in model units, zero-padded to [H_m, D_m]):

    x1 = x - t * v                         the one-step estimate of the clean chunk
    err = (Y - x1) * W                     W: prefix weights over waypoints (prefix_weights)
    correction = (d x1 / d x)^T err        a vector-Jacobian product through the step
    v <- v - min(c * inv_r2, max_guidance_weight) * correction
    tau = 1 - t, c = (1 - tau) / tau, inv_r2 = ((1 - tau)^2 + tau^2) / (1 - tau)^2

jacobian "identity" takes d x1 / d x as the identity: correction = err. That is what LeRobot
0.4.4 computes (its v is evaluated before x requires grad, so autograd sees no path through
the denoiser), and what the parity test pins (tests/test_lerobot_rtc.py). jacobian "vjp" is
the paper's: a guided step graph (models/flow_vjp.py: the step's inputs + "target",
"weights" -> "v", "correction") returns the product, at the cost of a backward pass per step.
Buffers are allocated once; a run allocates only the cycle's target. Not thread-safe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rtinfer.inference.flow_check import T, V, X
from rtinfer.inference.flow_runner import FlowRunner, _open
from rtinfer.inference.graph_runner import numpy_dtype

SCHEDULES = ("zeros", "ones", "linear", "exp")
JACOBIANS = ("identity", "vjp")


@dataclass(frozen=True)
class RtcGuidanceConfig:
    execution_horizon: int = 10  # waypoints of the left-over that guide at all
    max_guidance_weight: float = 10.0
    schedule: str = "linear"  # prefix weights past the delay: LeRobot's names
    jacobian: str = "identity"

    def __post_init__(self):
        if self.schedule not in SCHEDULES or self.jacobian not in JACOBIANS:
            raise ValueError(
                f"schedule {self.schedule!r}, jacobian {self.jacobian!r}: give a "
                f"schedule of {SCHEDULES} and a jacobian of {JACOBIANS}"
            )
        if self.max_guidance_weight <= 0:
            raise ValueError("max_guidance_weight must be > 0")


def prefix_weights(start: int, end: int, total: int, schedule: str) -> np.ndarray:
    """float32 [total]: 1 over the first `start` (the delay), decaying to 0 by `end` (the
    execution horizon), 0 after; LeRobot's get_prefix_weights."""
    start = min(start, end)
    w = np.zeros(total, np.float32)
    if schedule == "zeros":
        w[:start] = 1.0
        return w
    if schedule == "ones":
        w[:] = 1.0
        w[end:] = 0.0
        return w
    n = total - max(total - end, 0) - start
    if end > start and n > 0:
        lin = np.linspace(1.0, 0.0, n + 2, dtype=np.float32)[1:-1]
        if schedule == "exp":
            lin = lin * (np.expm1(lin) / np.float32(math.e - 1)).astype(np.float32)
        w[start : start + n] = lin
    w[: min(start, total)] = 1.0
    return w


def guidance_weight(t: float, max_w: float) -> np.float32:
    """min(c * inv_r2, max_w) at step time t, in float32 (LeRobot's, with its nan_to_num)."""
    tau = np.float32(1.0) - np.float32(t)
    one_minus = (np.float32(1.0) - tau) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_r2 = (one_minus + tau**2) / one_minus
        c = np.nan_to_num((np.float32(1.0) - tau) / tau, posinf=max_w)
        w = np.nan_to_num(np.float32(c * inv_r2), posinf=max_w)
    return np.float32(min(w, np.float32(max_w)))


class FlowGuidance:
    """A FlowRunner's cycle with RTC guidance toward the previous chunk's left-over."""

    def __init__(
        self, runner: FlowRunner, cfg: RtcGuidanceConfig = RtcGuidanceConfig(), guided_path=None
    ):
        if runner.model.integrator != "euler":
            raise ValueError(
                f"{runner.model.path}: RTC guidance needs an euler flow policy, "
                f"not {runner.model.integrator}"
            )
        if (cfg.jacobian == "vjp") != (guided_path is not None):
            raise ValueError(
                "jacobian 'vjp' needs the guided step graph (models/flow_vjp.py); "
                "'identity' takes none"
            )
        self.runner, self.cfg = runner, cfg
        r = runner
        self.target = np.zeros_like(r.x)
        self.weights = np.zeros((1, r.h_m, 1), np.float32)
        self.x1, self.err = np.zeros_like(r.x), np.zeros_like(r.x)
        self.correction = np.zeros_like(r.x)
        self.guided = self._bind(guided_path) if guided_path is not None else None

    def _bind(self, path):
        import onnxruntime as ort  # the runner imported it already

        r = self.runner
        sess = _open(ort, path, r.steps[0].get_session_options())
        t_in = next(i for i in sess.get_inputs() if i.name == T)
        self.t = np.zeros(t_in.shape, numpy_dtype(t_in.type))
        bind = sess.io_binding()
        bufs = {X: r.x, T: self.t, "target": self.target, "weights": self.weights, **r.cache}
        for i in sess.get_inputs():
            buf = bufs[i.name]
            bind.bind_input(i.name, "cpu", 0, buf.dtype, buf.shape, buf.ctypes.data)
        for name, buf in ((V, r.v), ("correction", self.correction)):
            bind.bind_output(name, "cpu", 0, np.float32, buf.shape, buf.ctypes.data)
        return sess, bind

    def run(
        self,
        feeds: dict,
        level: int,
        left_over: np.ndarray | None,
        delay: int,
        *,
        seed=None,
        noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """The chunk [H, D] (the runner's buffer). left_over: the previous chunk's waypoints
        from the new chunk's waypoint 0 on, (n, D) in action units (None: no guidance, the
        plain cycle); delay: how many of them execute before the new chunk lands."""
        r = self.runner
        if left_over is None:
            return r.run(feeds, level, seed=seed, noise=noise)
        r.start(seed, noise)
        r.encode(feeds)
        n, D = min(len(left_over), r.h_m), r.model.action.dim
        self.target.fill(0.0)
        r.out.to_model(np.asarray(left_over[:n], np.float32), self.target[0, :n, :D])
        horizon = min(self.cfg.execution_horizon, len(left_over))
        self.weights[0, :, 0] = prefix_weights(delay, horizon, r.h_m, self.cfg.schedule)
        g = r.model.levels[level]["graph"]
        p = r.plans[level]
        for i, t in enumerate(p.times):
            self._velocity(g, t)
            w = guidance_weight(t, self.cfg.max_guidance_weight)
            np.multiply(self.correction, w, out=self.correction)
            np.subtract(r.v, self.correction, out=r.v)
            p.step(i, r.x, r.v, r.scratch)
        return r.out.chunk_of(r.x[0])

    def _velocity(self, g: int, t) -> None:
        """v and the correction at time t for the current x."""
        r = self.runner
        if self.guided is not None:
            self.t[...] = t
            self.guided[0].run_with_iobinding(self.guided[1])
            return
        r.t[g][...] = t
        r.steps[g].run_with_iobinding(r._step_bind[g])
        np.multiply(r.v, np.float32(t), out=self.x1)  # identity: correction = err
        np.subtract(r.x, self.x1, out=self.x1)
        np.subtract(self.target, self.x1, out=self.err)
        np.multiply(self.err, self.weights, out=self.correction)
