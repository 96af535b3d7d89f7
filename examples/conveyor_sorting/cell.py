"""ConveyorCell: the MuJoCo conveyor-sorting cell behind controllers.hardware.HardwareInterface.

`write()` sets the three gantry motor forces and the suction valve (the tool), `step()` advances the
physics by exactly 1 ms, `read()` returns the gantry state at the current sim time.

Belt: kinematic. The belt geom's contact is frictionless (priority + condim 1), and every
ms each free object resting on it gets its horizontal velocity set to the belt velocity
and its spin zeroed: exact belt speed, deterministic, cheap. Which objects rest on the
belt is re-checked every SCORE_EVERY ms and on every spawn, attach and release.

Suction: a weld switched on by touch while the valve is open (see suction.py).
Not thread-safe: one loop drives a cell.
"""

from __future__ import annotations

import mujoco
import numpy as np

from controllers.hardware import Command, RobotState

from .config import CellConfig
from .metrics import Metrics
from .pool import LIVE, ObjectPool
from .scene import build_mjcf
from .suction import ATTACHED, SuctionCup

NS_PER_STEP = 1_000_000
SCORE_EVERY = 5  # steps between outcome checks: objects move < 2 mm in 5 ms


class ConveyorCell:
    def __init__(self, cfg: CellConfig | None = None):
        self.cfg = cfg = cfg or CellConfig()
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(cfg))
        self.data = mujoco.MjData(self.model)
        m = self.model
        assert list(m.jnt_qposadr[:3]) == [0, 1, 2], "gantry joints must come first"
        self.pool = ObjectPool(cfg, m, self.data)
        self.cup = SuctionCup(cfg, m, self.data, self.pool)
        # Band above the belt within which an object counts as resting on it (m).
        self._reach = [max(cfg.classes[c].size) * 1.8 for c in self.pool.slot_class]
        self._state = RobotState.zeros(3)
        # Cached views: MjData attribute access builds a new array wrapper on every call.
        self._qpos3, self._qvel3, self._ctrl3 = (
            self.data.qpos[:3],
            self.data.qvel[:3],
            self.data.ctrl[:3],
        )
        self._qvel_flat = self.pool.qvel.reshape(-1)  # a view: the pool's rows are contiguous
        assert np.shares_memory(self._qvel_flat, self.data.qvel)
        self.reset(cfg.seed)

    # -- episode ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None, instruction=None) -> None:
        """Empty belt, gantry at home, new RNG stream and class -> bin instruction
        (a random permutation unless given)."""
        cfg = self.cfg
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:3] = cfg.gantry_home
        self.rng = np.random.default_rng(cfg.seed if seed is None else seed)
        perm = self.rng.permutation(cfg.num_classes) if instruction is None else instruction
        self.instruction = np.asarray(perm, dtype=np.int64)
        if sorted(self.instruction.tolist()) != list(range(cfg.num_classes)):
            raise ValueError(f"instruction must be a permutation of bins, got {perm}")
        self.pool.reset()
        self.cup.reset()
        self.metrics = Metrics()
        self.step_count, self.suction = 0, False
        self.spawn_limit: int | None = None  # stop spawning after this many objects
        self.next_spawn_step = 0
        self._on_belt: list[int] = []
        self._belt_dofs, self._belt_vel = np.zeros(0, np.int64), np.zeros(0)
        mujoco.mj_forward(self.model, self.data)

    def place_object(self, cls: int, x: float, y: float = 0.0, yaw: float = 0.0) -> int:
        """Put an object of class `cls` on the belt at (x, y) now (for tests and scripted
        scenarios); returns its pool slot, or -1 if the class's pool is exhausted."""
        s = self.pool.spawn(cls, y, yaw, self.step_count)
        if s >= 0:
            self.pool.qpos[s, 0] = x
            self.metrics.spawned += 1
            self._refresh_belt()
        return s

    @property
    def held(self) -> int:
        """Pool slot of the object on the suction cup, -1 if none."""
        return self.cup.held

    @property
    def t_ns(self) -> int:
        """Simulated time since reset (ns)."""
        return self.step_count * NS_PER_STEP

    # -- HardwareInterface -------------------------------------------------------------------
    def read(self) -> RobotState:
        """Gantry state now. The returned object is reused (updated in place) by the next read()."""
        s = self._state
        s.t_ns, s.tool, s.holding = (
            self.step_count * NS_PER_STEP,
            float(self.suction),
            self.cup.held >= 0,
        )
        s.pos[:] = self._qpos3
        s.vel[:] = self._qvel3
        return s

    def write(self, cmd: Command) -> None:
        """Motor forces (N; MuJoCo clamps them to force_limit) and the suction valve (the
        tool: open when its command is 1)."""
        self._ctrl3[:] = cmd.value
        self.suction = cmd.tool > 0.5

    # -- physics -------------------------------------------------------------------------------
    def step(self, n: int = 1) -> None:
        """Advance n ms: suction, belt, physics, then spawning and scoring."""
        for _ in range(n):
            change = self.cup.update(self.suction)
            if change:
                if change == ATTACHED:
                    self.pool.picked[self.held] = True
                    self.metrics.picked += 1
                self._refresh_belt()
            self._drive_belt()
            mujoco.mj_step(self.model, self.data)
            self.step_count += 1
            if self.step_count >= self.next_spawn_step:
                self._spawn()
            if self.step_count % SCORE_EVERY == 0:
                self.pool.score(self.step_count, self.held, self.instruction, self.metrics)
                self.metrics.elapsed_s = self.step_count / 1000
                self._refresh_belt()

    def _refresh_belt(self) -> None:
        """Recompute which pool slots rest on the belt (every SCORE_EVERY ms, and whenever
        an object is spawned, attached or released); _drive_belt uses the cached list.
        Python floats per live slot: a handful of objects, where numpy's calls cost more."""
        p, cfg, held = self.pool, self.cfg, self.held
        x0, x1, half, top = cfg.belt_x[0], cfg.belt_x[1], cfg.belt_half_width, cfg.belt_top
        on = []
        for s, state in enumerate(p.state.tolist()):
            if state == LIVE and s != held:
                x, y, z = p.qpos[s, :3].tolist()
                if x0 <= x <= x1 and abs(y) <= half and top < z < top + self._reach[s]:
                    on.append(s)
        if on == self._on_belt:
            return
        self._on_belt = on
        # qvel entries set every ms: vx = belt speed; vy and the spin (wx, wy, wz) = 0
        self._belt_dofs = (np.array(on, np.int64)[:, None] * 6 + [0, 1, 3, 4, 5]).ravel()
        self._belt_vel = np.tile([cfg.belt_speed, 0.0, 0.0, 0.0, 0.0], len(on))

    def _drive_belt(self) -> None:
        if self._on_belt:
            self._qvel_flat[self._belt_dofs] = self._belt_vel

    def _spawn(self) -> None:
        cfg, rng = self.cfg, self.rng
        if self.spawn_limit is not None and self.metrics.spawned >= self.spawn_limit:
            self.next_spawn_step = 1 << 62
            return
        cls = int(rng.integers(cfg.num_classes))
        y = float(rng.uniform(-cfg.spawn_y, cfg.spawn_y))
        yaw = float(rng.uniform(-np.pi, np.pi))
        gap_s = float(rng.uniform(*cfg.spawn_interval_s))
        if self.pool.crowded(cfg.belt_x[0] + 0.04, y, 0.08):
            self.next_spawn_step = self.step_count + 100  # try again in 0.1 s
            return
        if self.pool.spawn(cls, y, yaw, self.step_count) < 0:
            self.metrics.pool_exhausted += 1
        else:
            self.metrics.spawned += 1
            self._refresh_belt()
        self.next_spawn_step = self.step_count + max(1, int(round(gap_s * 1000)))
