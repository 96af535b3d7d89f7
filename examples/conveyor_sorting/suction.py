"""The suction cup: a weld equality per pool body, switched on by touch while the valve is open.

When the valve is open and the cup is within `touch_distance` of an object (the cup geom's
margin/gap report such near-contacts without generating forces), that body's weld is set
to the current relative pose and activated (data.eq_active); closing the valve
deactivates it. A weld cannot slip or tear, unlike an adhesion actuator whose hold
depends on contact friction and the gantry's acceleration, so a pick succeeds or fails
by geometry alone - deterministic and easy to test. Not thread-safe.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .config import CellConfig
from .pool import ObjectPool

ATTACHED, RELEASED = 1, -1


class SuctionCup:
    def __init__(
        self, cfg: CellConfig, model: mujoco.MjModel, data: mujoco.MjData, pool: ObjectPool
    ):
        self.cfg, self.model, self.data, self.pool = cfg, model, data, pool
        self._geom_slot = np.full(model.ngeom, -1)
        self._geom_slot[pool.geom_ids] = np.arange(pool.n)
        self._cup_geom = model.geom("cup").id
        self._cup_body = model.body("gantry_z").id
        self._eq = np.array([model.equality(f"suction{s}").id for s in range(pool.n)])
        self._rel_quat, self._inv_quat = np.empty(4), np.empty(4)
        self.held = -1  # pool slot of the attached object, -1 if none

    def reset(self) -> None:
        """Forget the held object (mj_resetData already deactivated every weld)."""
        self.held = -1

    def update(self, valve_open: bool) -> int:
        """Attach or release per the valve; returns ATTACHED, RELEASED or 0."""
        if valve_open and self.held < 0:
            s = self._touching_slot()
            if s >= 0:
                self._attach(s)
                return ATTACHED
        elif not valve_open and self.held >= 0:
            self.data.eq_active[self._eq[self.held]] = 0
            self.held = -1
            return RELEASED
        return 0

    def _touching_slot(self) -> int:
        """Pool slot of the object nearest the cup among its (near-)contacts, or -1."""
        d = self.data
        if d.ncon == 0:
            return -1
        geoms = d.contact.geom[: d.ncon]
        mask = (geoms == self._cup_geom).any(axis=1)
        if not mask.any():
            return -1
        pair = geoms[mask]
        other = np.where(pair[:, 0] == self._cup_geom, pair[:, 1], pair[:, 0])
        dist = d.contact.dist[: d.ncon][mask]
        ok = (dist <= self.cfg.touch_distance) & (self._geom_slot[other] >= 0)
        if not ok.any():
            return -1
        return int(self._geom_slot[other[ok][np.argmin(dist[ok])]])

    def _attach(self, s: int) -> None:
        """Weld body s to the cup at their current relative pose (no jump on activation)."""
        d, b, c = self.data, self.pool.body_ids[s], self._cup_body
        e = self._eq[s]
        # Weld data: anchor (in body2), relative position and orientation of body2 in body1.
        self.model.eq_data[e, 0:3] = 0.0
        self.model.eq_data[e, 3:6] = d.xmat[c].reshape(3, 3).T @ (d.xpos[b] - d.xpos[c])
        mujoco.mju_negQuat(self._inv_quat, d.xquat[c])
        mujoco.mju_mulQuat(self._rel_quat, self._inv_quat, d.xquat[b])
        self.model.eq_data[e, 6:10] = self._rel_quat
        d.eq_active[e] = 1
        self.held = s
