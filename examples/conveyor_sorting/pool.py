"""The object pool: preallocated free bodies that are spawned onto the belt, scored and parked.

MJCF cannot add bodies at run time, so every object the cell will ever show exists from
the start. A parked body sits far away with collisions off and gravity compensated, so it
costs the solver almost nothing and never moves. Not thread-safe.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .config import CellConfig
from .metrics import Metrics
from .scene import park_position

PARKED, LIVE, SETTLING = 0, 1, 2


class ObjectPool:
    def __init__(self, cfg: CellConfig, model: mujoco.MjModel, data: mujoco.MjData):
        self.cfg, self.model, self.data = cfg, model, data
        n = cfg.num_classes * cfg.pool_per_class
        self.n = n
        self.slot_class = np.arange(n) // cfg.pool_per_class
        self.body_ids = np.array([model.body(f"obj{s}").id for s in range(n)])
        self.geom_ids = np.array([model.geom(f"obj{s}").id for s in range(n)])
        self.half_h = np.array([cfg.classes[c].half_height for c in self.slot_class])
        qadr = model.jnt_qposadr[model.body_jntadr[self.body_ids]]
        vadr = model.jnt_dofadr[model.body_jntadr[self.body_ids]]
        # Pool bodies come last and contiguous, so (n, 7) / (n, 6) views cover them.
        assert (np.diff(qadr) == 7).all() and (np.diff(vadr) == 6).all()
        self.qpos = data.qpos[qadr[0] : qadr[0] + 7 * n].reshape(n, 7)
        self.qvel = data.qvel[vadr[0] : vadr[0] + 6 * n].reshape(n, 6)
        self.state = np.zeros(n, np.int8)
        self.picked = np.zeros(n, bool)  # ever held by the cup since spawning
        self.born_step = np.zeros(n, np.int64)
        self.park_step = np.zeros(n, np.int64)

    def reset(self) -> None:
        for s in range(self.n):
            self.park(s)

    def park(self, s: int) -> None:
        self.qpos[s] = (*park_position(s), 1.0, 0.0, 0.0, 0.0)
        self.qvel[s] = 0.0
        g, b = self.geom_ids[s], self.body_ids[s]
        self._set_collision(g, b, 0, 0)
        self.model.body_gravcomp[b] = 1.0
        self.state[s] = PARKED

    def _set_collision(self, g: int, b: int, contype: int, conaffinity: int) -> None:
        # The broadphase filters on the per-body OR of its geoms' bits: update both.
        m = self.model
        m.geom_contype[g] = m.body_contype[b] = contype
        m.geom_conaffinity[g] = m.body_conaffinity[b] = conaffinity

    def spawn(self, cls: int, y: float, yaw: float, step: int) -> int:
        """Put a parked body of class `cls` at the start of the belt; -1 if none is free."""
        free = np.flatnonzero((self.state == PARKED) & (self.slot_class == cls))
        if free.size == 0:
            return -1
        s, cfg = int(free[0]), self.cfg
        z = cfg.belt_top + self.half_h[s] + 0.0005
        self.qpos[s] = (cfg.belt_x[0] + 0.04, y, z, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        self.qvel[s] = (cfg.belt_speed, 0, 0, 0, 0, 0)
        g, b = self.geom_ids[s], self.body_ids[s]
        self._set_collision(g, b, 1, 3)
        self.model.body_gravcomp[b] = 0.0
        self.state[s], self.picked[s], self.born_step[s] = LIVE, False, step
        return s

    def crowded(self, x: float, y: float, radius: float) -> bool:
        """A live object lies within `radius` (m) of (x, y) in the plane."""
        live = self.state == LIVE
        d2 = (self.qpos[:, 0] - x) ** 2 + (self.qpos[:, 1] - y) ** 2
        return bool((live & (d2 < radius * radius)).any())

    def score(self, step: int, held: int, instruction: np.ndarray, metrics: Metrics) -> None:
        """Resolve live objects that reached a bin, fell off, or outlived max_object_life_s.
        Python floats per slot: a handful of live objects, where numpy's calls cost more."""
        cfg = self.cfg
        states = self.state.tolist()
        for s, state in enumerate(states):
            if state == SETTLING and self.park_step[s] <= step:
                self.park(s)
        max_age = cfg.max_object_life_s * 1000
        for s, state in enumerate(states):
            if state != LIVE or s == held:
                continue
            x, y, z = self.qpos[s, :3].tolist()
            b = -1  # the first bin whose footprint holds (x, y)
            if abs(y - cfg.bin_y) < cfg.bin_half:
                b = next((i for i, bx in enumerate(cfg.bin_x) if abs(x - bx) < cfg.bin_half), -1)
            if b >= 0 and z < cfg.bin_wall_h:  # binned
                if instruction[self.slot_class[s]] == b:
                    metrics.correct += 1
                else:
                    metrics.wrong += 1
                self.state[s], self.park_step[s] = SETTLING, step + int(cfg.settle_s * 1000)
            elif (b < 0 and z < cfg.belt_top - 0.1) or step - self.born_step[s] > max_age:
                if self.picked[s]:  # lost off the belt, or too old
                    metrics.dropped += 1
                else:
                    metrics.missed += 1
                self.park(s)
