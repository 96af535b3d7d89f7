"""The step schedules of a flow policy's integrators: what each of K steps feeds as "t" and
how it updates the noisy chunk x. Pure numpy, computed once per level at load.

- Euler (flow matching, LeRobot SmolVLA / pi0): t = 1 is noise, t = 0 is data; dt = -1/K,
  step i at t_i = float32(1 + i * dt) (computed in float64, as LeRobot 0.4.4 does), then
  x <- x + float32(dt) * v.
- DDIM (eta 0, diffusers' DDIMScheduler with timestep_spacing "leading"): over N =
  len(alphas_cumprod) train timesteps, step_ratio = N // K, timesteps = arange(K) *
  step_ratio reversed + steps_offset; each step predicts x0 (from epsilon, sample or
  v_prediction), clips it to +-clip_sample where set, and moves to the previous timestep:
  x <- sqrt(a_prev) * x0 + sqrt(1 - a_prev) * eps, a_prev = alphas_cumprod[t - step_ratio]
  or (t - step_ratio < 0) 1 where set_alpha_to_one else alphas_cumprod[0].
Each `step` writes into preallocated buffers only (out= everywhere): no allocation per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EulerPlan:
    times: np.ndarray  # float32 [K]: the "t" fed at each step
    dt: np.float32

    def step(self, i: int, x: np.ndarray, v: np.ndarray, scratch) -> None:
        np.multiply(v, self.dt, out=scratch[0])
        np.add(x, scratch[0], out=x)


@dataclass(frozen=True)
class DdimPlan:
    times: np.ndarray  # int64 [K]: the train timestep fed at each step
    coef: np.ndarray  # float32 [K, 4]: sqrt(a), sqrt(1 - a), sqrt(a_prev), sqrt(1 - a_prev)
    prediction: str
    clip: float | None

    def step(self, i: int, x: np.ndarray, out: np.ndarray, scratch) -> None:
        sa, sb, sap, sbp = self.coef[i]
        x0, eps = scratch
        if self.prediction == "epsilon":
            np.multiply(out, sb, out=x0)
            np.subtract(x, x0, out=x0)
            np.divide(x0, sa, out=x0)
            eps = out
        elif self.prediction == "sample":
            np.copyto(x0, out)
            np.multiply(x0, sa, out=eps)
            np.subtract(x, eps, out=eps)
            np.divide(eps, sb, out=eps)
        else:  # v_prediction
            np.multiply(x, sa, out=x0)
            np.multiply(out, sb, out=eps)
            np.subtract(x0, eps, out=x0)
            np.multiply(out, sa, out=eps)
            np.multiply(x, sb, out=x)  # x is rebuilt below: use it as scratch
            np.add(eps, x, out=eps)
        if self.clip is not None:
            np.clip(x0, -self.clip, self.clip, out=x0)
        np.multiply(x0, sap, out=x)
        np.multiply(eps, sbp, out=x0)
        np.add(x, x0, out=x)


def euler_plan(k: int) -> EulerPlan:
    dt = -1.0 / k
    return EulerPlan(np.array([1.0 + i * dt for i in range(k)], np.float32), np.float32(dt))


def ddim_plan(ddim: dict, k: int) -> DdimPlan:
    ac = np.asarray(ddim["alphas_cumprod"], np.float32)
    n, offset = len(ac), int(ddim.get("steps_offset", 0))
    ratio = n // k
    times = (np.arange(0, k) * ratio).round()[::-1].copy().astype(np.int64) + offset
    prev = times - ratio
    final = np.float32(1.0) if ddim.get("set_alpha_to_one", True) else ac[0]
    a = ac[times]
    a_prev = np.where(prev >= 0, ac[np.clip(prev, 0, n - 1)], final).astype(np.float32)
    one = np.float32(1.0)
    coef = np.stack([a**0.5, (one - a) ** 0.5, a_prev**0.5, (one - a_prev) ** 0.5], 1)
    clip = ddim.get("clip_sample")
    clip = None if clip in (None, False) else float(1.0 if clip is True else clip)
    return DdimPlan(times, coef.astype(np.float32), ddim.get("prediction", "epsilon"), clip)


def plan(model, k: int):
    """The schedule of a FlowModelDir's integrator at K steps."""
    return euler_plan(k) if model.integrator == "euler" else ddim_plan(model.ddim, k)
