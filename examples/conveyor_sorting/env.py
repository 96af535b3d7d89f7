"""ConveyorSortEnv: the cell as a gymnasium env for offline, lockstep use.

One env step = `steps_per_action` ms of physics (default: one waypoint period of the
action tokenizer, 50 ms). The action is a chunk (H, D) of waypoints (x, y, z, suction)
whose waypoint i targets observation-capture time + (i + 1) * period; it is applied
through controllers.stack.ControlStack at 1 kHz exactly as the ControllerNode would
(set_chunk, then read -> compute -> write -> step each ms). With latency_ms > 0 the
previous chunk keeps playing for that long before the new one is set, as on a robot
where inference takes time. Observation: see observe.py. Reward per step: +1 per object
sorted into its instructed bin, -1 per object put in a wrong bin, dropped or missed.
Deterministic: same seed and actions -> same observations.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from controllers.stack import ControlConfig, ControlStack

from .cell import NS_PER_STEP, ConveyorCell
from .config import EnvConfig, control_config, tokenizer_config
from .observe import observe
from .pool import LIVE


class ConveyorSortEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        cfg: EnvConfig | None = None,
        *,
        control: ControlConfig | None = None,
        render_mode: str | None = None,
    ):
        self.cfg = cfg = cfg or EnvConfig()
        c = cfg.cell
        self.cell = ConveyorCell(c)
        self.tokenizer_cfg = tokenizer_config(c, horizon=cfg.horizon, bins=cfg.token_bins)
        self.period_ns = self.tokenizer_cfg.period_ns
        self.steps_per_action = cfg.steps_per_action or self.period_ns // NS_PER_STEP
        if not 0 <= cfg.latency_ms < self.steps_per_action:
            raise ValueError("latency_ms must be in [0, steps_per_action)")
        self.control_cfg = control or control_config(c)
        self.render_mode, self._renderer = render_mode, None
        tc = self.tokenizer_cfg
        self.action_space = spaces.Box(
            np.tile(np.float32(tc.low), (tc.horizon, 1)),
            np.tile(np.float32(tc.high), (tc.horizon, 1)),
            dtype=np.float32,
        )
        k, n = c.visible_k, c.num_classes
        self.observation_space = spaces.Dict(
            {
                "objects": spaces.Box(-np.inf, np.inf, (k, 4), np.float32),
                "gantry": spaces.Box(-np.inf, np.inf, (8,), np.float32),
                "held": spaces.Box(-1, n - 1, (1,), np.float32),
                "instruction": spaces.MultiDiscrete(np.full(n, n), dtype=np.int32),
            }
        )
        self.stack = ControlStack(self.control_cfg)
        self._mirror = None
        if cfg.camera is not None:
            from .camera import CellMirror

            h, w = cfg.frame_hw
            self._mirror = CellMirror(cfg.camera, w, h, c)
            self.observation_space["frames"] = spaces.Dict(
                {
                    cfg.camera: spaces.Tuple(
                        (
                            spaces.Box(0, 255, (h, w, 3), np.uint8),
                            spaces.Box(0, 2**62, (), np.int64),
                        )
                    )
                }
            )

    def _observe(self) -> dict:
        obs = observe(self.cell)
        if self._mirror is not None:  # lockstep: the frame shows the world at this capture
            obs["frames"] = {
                self.cfg.camera: (self._mirror.render(self.cell.data.qpos), self.cell.t_ns)
            }
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """options: {"instruction": permutation} to fix the class -> bin mapping."""
        super().reset(seed=seed)
        cell_seed = int(self.np_random.integers(2**63 - 1))
        self.cell.reset(cell_seed, instruction=(options or {}).get("instruction"))
        self.cell.spawn_limit = self.cfg.episode_objects
        self.stack = ControlStack(self.control_cfg)
        self._score = 0
        return self._observe(), self._info()

    def _tick(self, n: int) -> None:
        cell, stack = self.cell, self.stack
        for _ in range(n):
            cmd = stack.compute(cell.read(), cell.t_ns)
            cell.write(cmd)
            cell.step()

    def step(self, action):
        chunk = np.asarray(action, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != self.tokenizer_cfg.dim:
            raise ValueError(
                f"action must be (H, {self.tokenizer_cfg.dim}) waypoints, got {chunk.shape}"
            )
        capture_ns = self.cell.t_ns
        self._tick(self.cfg.latency_ms)
        self.stack.set_chunk(chunk, capture_ns, self.period_ns, self.cell.t_ns)
        self._tick(self.steps_per_action - self.cfg.latency_ms)
        m = self.cell.metrics
        score = m.correct - m.wrong - m.dropped - m.missed
        reward, self._score = float(score - self._score), score
        done = (
            m.spawned >= self.cfg.episode_objects
            and m.resolved >= m.spawned
            and not (self.cell.pool.state == LIVE).any()
        )
        truncated = self.cell.t_ns >= self.cfg.max_episode_s * 1e9
        return self._observe(), reward, bool(done), bool(truncated and not done), self._info()

    def _info(self) -> dict:
        return {
            **self.cell.metrics.as_dict(),
            "t_ns": self.cell.t_ns,
            "instruction": self.cell.instruction.copy(),
            **self.stack.counters,
        }

    def render(self):
        """RGB frame (H, W, 3) uint8 from the overview camera. Slow; for visualisation only."""
        if self.render_mode != "rgb_array":
            return None
        import mujoco

        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.cell.model, 480, 640)
        self._renderer.update_scene(self.cell.data, camera="overview")
        return self._renderer.render()

    def close(self):
        if self._mirror is not None:
            self._mirror.close()
            self._mirror = None
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
