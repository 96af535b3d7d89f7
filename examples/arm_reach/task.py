"""The reach task: a sequence of target points on the table, each to be reached and held.

A target appears somewhere in the workspace (uniform in a cylindrical sector in front of
the arm, at least `min_step_m` from the previous one). It is reached when the end effector
stays within `tolerance_m` of it for `dwell_s` without a break; the next target then
appears at once. A target not reached within `timeout_s` of appearing is missed and
replaced. Success rate = reached / (reached + missed); time to reach = from the target's
appearance to the start of the dwell that completed it. Pure Python on floats: update()
runs every physics step. Deterministic for a seed. Not thread-safe.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np


@dataclass(frozen=True)
class ReachConfig:
    """The task and the simulator's run settings: the `hardware:` section of robot.yaml
    (every field may be set there or with `--set key=value`).

    seed: the target sequence. seconds: sim time to run after the first chunk is accepted
    (None: until stopped). wait_s: how long the world stands still waiting for that chunk.
    obs_hz: observations per second (the policy rate). targets: stop after this many
    targets are resolved (None: no limit)."""

    seed: int = 0
    seconds: float | None = None
    wait_s: float = 30.0
    obs_hz: float = 20.0
    targets: int | None = None
    tolerance_m: float = 0.02
    dwell_s: float = 0.3
    timeout_s: float = 4.0
    radius_m: tuple[float, float] = (0.25, 0.48)  # from the base axis
    yaw: tuple[float, float] = (-1.0, 1.0)  # rad, about the base axis, 0 = +x
    height_m: tuple[float, float] = (0.04, 0.30)  # above the table top
    min_step_m: float = 0.10

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("radius_m", "yaw", "height_m"):
                if not (
                    isinstance(v, (list, tuple))
                    and len(v) == 2
                    and all(map(_number, v))
                    and v[0] < v[1]
                ):
                    raise ValueError(
                        f"hardware {f.name}: needs [low, high] numbers with low < high, got {v!r}"
                    )
                object.__setattr__(self, f.name, (float(v[0]), float(v[1])))
            elif f.name in ("seed", "targets"):
                if not (isinstance(v, int) and not isinstance(v, bool)) and v is not None:
                    raise ValueError(f"hardware {f.name}: needs an integer, got {v!r}")
            elif not (_number(v) or (v is None and f.name == "seconds")):
                raise ValueError(f"hardware {f.name}: needs a number, got {v!r}")
        positive = (
            "wait_s",
            "obs_hz",
            "tolerance_m",
            "dwell_s",
            "timeout_s",
            "min_step_m",
            "seconds",
            "targets",
        )
        bad = [
            f"{k}={getattr(self, k)!r} must be > 0"
            for k in positive
            if getattr(self, k) is not None and not getattr(self, k) > 0
        ]
        if self.seed is None or self.seed < 0:
            bad.append(f"seed={self.seed!r} must be >= 0")
        if bad:
            raise ValueError(f"hardware: {'; '.join(bad)}")

    @classmethod
    def from_dict(cls, d: dict) -> ReachConfig:
        """From the robot YAML's `hardware:` mapping; an unknown key is one ValueError line
        listing the known ones."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(
                f"hardware: unknown keys {unknown} for the reach arm; the keys are {names}"
            )
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class ReachTask:
    """The current target and the score. Times are sim nanoseconds."""

    def __init__(self, cfg: ReachConfig):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self._tol2 = cfg.tolerance_m**2
        self._dwell_ns, self._timeout_ns = int(cfg.dwell_s * 1e9), int(cfg.timeout_s * 1e9)
        self.target = (0.0, 0.0, 0.0)
        self.target_id = -1
        self.reached = self.missed = 0
        self.reach_s: list[float] = []
        self._appear_ns = 0
        self._inside_ns: int | None = None  # when the current unbroken stay began

    def start(self, t_ns: int) -> None:
        """Present the first target."""
        self._next(t_ns)

    @property
    def resolved(self) -> int:
        return self.reached + self.missed

    def _next(self, t_ns: int) -> None:
        c, rng = self.cfg, self.rng
        prev = self.target
        for _ in range(100):
            r, yaw, z = rng.uniform(*c.radius_m), rng.uniform(*c.yaw), rng.uniform(*c.height_m)
            p = (r * math.cos(yaw), r * math.sin(yaw), z)
            if self.target_id < 0 or math.dist(p, prev) >= c.min_step_m:
                break
        self.target, self.target_id = p, self.target_id + 1
        self._appear_ns, self._inside_ns = t_ns, None

    def update(self, ee, t_ns: int) -> bool:
        """Score the end effector position ee (x, y, z) at t_ns; True when a new target
        appeared (reached or missed)."""
        x, y, z = ee
        tx, ty, tz = self.target
        if (x - tx) ** 2 + (y - ty) ** 2 + (z - tz) ** 2 <= self._tol2:
            if self._inside_ns is None:
                self._inside_ns = t_ns
            elif t_ns - self._inside_ns >= self._dwell_ns:
                self.reached += 1
                self.reach_s.append((self._inside_ns - self._appear_ns) / 1e9)
                self._next(t_ns)
                return True
        else:
            self._inside_ns = None
        if t_ns - self._appear_ns >= self._timeout_ns and self._inside_ns is None:
            self.missed += 1
            self._next(t_ns)
            return True
        return False

    def metrics(self) -> dict:
        """Counts, success rate and time-to-reach statistics (s) of the resolved targets."""
        rs = np.asarray(self.reach_s)
        stats = (
            {
                "mean": float(rs.mean()),
                "p50": float(np.percentile(rs, 50)),
                "p90": float(np.percentile(rs, 90)),
                "max": float(rs.max()),
            }
            if rs.size
            else {}
        )
        return {
            "targets": self.resolved,
            "reached": self.reached,
            "missed": self.missed,
            "success_rate": self.reached / self.resolved if self.resolved else None,
            "reach_s": stats,
        }
