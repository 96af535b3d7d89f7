"""ReachExpert: the scripted expert, from observations only.

Per call (one policy period) it takes the target from the observation, solves the joint
goal by damped-least-squares IK (kinematics.JointGoal; cached per target, since the answer
depends on the target alone) and plans a straight joint-space motion from the observed
joint state to it: every joint moves in proportion, so all arrive together, the speed along
the line follows a braking curve and is capped per joint (VMAX, AMAX, inside the
controller's limits). The plan is integrated at ROLLOUT_DT and sampled at the chunk's
waypoint times (start_ns + i * period_ns after capture): an (H, N) chunk of absolute joint
angles (rad), the action spec's units. Deterministic: a function of the observation.
Run `python -m examples.arm_reach.expert --targets 50` for its lockstep success (JSON).
"""

from __future__ import annotations

import numpy as np

from controllers.config import ControlConfig
from rtinfer.model.action_spec import ActionSpec

from .kinematics import JointGoal

VMAX = 1.5  # rad/s per joint
AMAX = 6.0  # rad/s^2 per joint
GAIN = 8.0  # 1/s: speed per unit distance near the goal
ROLLOUT_DT = 0.005


class ReachExpert:
    """Not thread-safe (one IK model)."""

    def __init__(self, control: ControlConfig, spec: ActionSpec):
        self.goal = JointGoal(control)
        self.n, self.horizon = control.n, spec.horizon
        self.period_s, self.start_s = spec.period_ns * 1e-9, spec.start_ns * 1e-9
        self.low, self.high = np.asarray(spec.low[: self.n]), np.asarray(spec.high[: self.n])
        self._cache: tuple[tuple, np.ndarray] | None = None

    def reset(self) -> None:
        self._cache = None

    def joint_goal(self, target) -> np.ndarray:
        key = tuple(np.round(np.asarray(target, np.float64), 6))
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self.goal.solve(key)[0])
        return self._cache[1]

    def act(self, obs: dict) -> np.ndarray:
        """(H, N) float32 chunk of joint angles (rad) for one observation."""
        j = np.asarray(obs["joints"], np.float64)
        return rollout(
            j[: self.n],
            j[self.n :],
            self.joint_goal(obs["target"]),
            [self.start_s + i * self.period_s for i in range(self.horizon)],
        )


def rollout(q, qd, goal, times) -> np.ndarray:
    """Sample at `times` (s, increasing) the straight joint-space motion from (q, qd) to goal."""
    q, w = np.array(q, np.float64), np.array(qd, np.float64)
    out = np.empty((len(times), len(q)), np.float32)
    t, k = 0.0, 0
    while k < len(times):
        if t >= times[k] - 1e-9:
            out[k] = q
            k += 1
            continue
        e = goal - q
        d = float(np.linalg.norm(e))
        # speed along the line: braking curve, linear near the goal, capped so no joint
        # exceeds VMAX
        speed = min(GAIN * d, np.sqrt(2 * AMAX * 0.8 * d))
        if d > 1e-9:
            speed = min(speed, VMAX * d / float(np.abs(e).max()))
            wd = e * (speed / d)
        else:
            wd = np.zeros_like(e)
        w += np.clip(wd - w, -AMAX * ROLLOUT_DT, AMAX * ROLLOUT_DT)
        q += w * ROLLOUT_DT
        t += ROLLOUT_DT
    return out
