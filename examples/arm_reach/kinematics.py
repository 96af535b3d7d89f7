"""Inverse kinematics for the reach arm on its own MuJoCo model: damped least squares.

`JointGoal.solve(target)` returns joint angles that put the hand tip on the target point:
iterations of dq = J^T (J J^T + lambda^2 I)^-1 e (mj_jacSite for J) plus a null-space pull
towards the ready pose, always started from the ready pose, so the answer is a function of
the target alone (the same target always gets the same pose: a policy can learn it) and
stays in the ready pose's elbow-up family. Joint limits are kept by clipping each iterate
into the axes' workspaces. Not thread-safe (one private MjData).
"""

from __future__ import annotations

import mujoco
import numpy as np

from controllers.config import ControlConfig

from .scene import ArmGeometry, build_mjcf
from .sim import ready_pose

DAMPING = 0.05  # lambda (m): keeps steps bounded near singular poses
NULL_GAIN = 0.05  # per iteration, towards the ready pose in J's null space
ITERATIONS = 200
TOL_M = 1e-4


class JointGoal:
    def __init__(self, control: ControlConfig, geom: ArmGeometry | None = None):
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(control, geom))
        self.data = mujoco.MjData(self.model)
        self.n = control.n
        self.rest = ready_pose(control)
        self.low, self.high = (np.array(v) for v in zip(*(a.workspace for a in control.axes)))
        self._site = self.model.site("ee").id
        self._jac = np.zeros((3, self.model.nv))

    def tip(self, q) -> np.ndarray:
        """Forward kinematics: the hand tip's position (m) at joint angles q."""
        self.data.qpos[: self.n] = q
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)  # cdof: mj_jacSite needs it
        return self.data.site_xpos[self._site].copy()

    def solve(self, target) -> tuple[np.ndarray, float]:
        """(joint angles, remaining tip error in m) for the target point (x, y, z)."""
        target = np.asarray(target, np.float64)
        q = self.rest.copy()
        eye = np.eye(self.n)
        err = np.inf
        for _ in range(ITERATIONS):
            e = target - self.tip(q)
            err = float(np.linalg.norm(e))
            if err < TOL_M:
                break
            mujoco.mj_jacSite(self.model, self.data, self._jac, None, self._site)
            J = self._jac[:, : self.n]
            Jp = J.T @ np.linalg.inv(J @ J.T + DAMPING**2 * np.eye(3))
            dq = Jp @ e + (eye - Jp @ J) @ (NULL_GAIN * (self.rest - q))
            q = np.clip(q + dq, self.low, self.high)
        return q, err
