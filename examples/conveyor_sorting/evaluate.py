"""Measure the scripted expert (or any `act(obs)` policy) in the env over many objects."""
from __future__ import annotations

import time
from dataclasses import replace

from .config import EnvConfig
from .env import ConveyorSortEnv
from .expert import ScriptedExpert
from .metrics import Metrics

COUNTS = ("spawned", "picked", "correct", "wrong", "missed", "dropped", "pool_exhausted")


def run_expert(objects: int = 200, *, seed: int = 0, per_episode: int = 20,
               cfg: EnvConfig | None = None, progress=None) -> dict:
    """Run episodes of `per_episode` objects (a new instruction each) until `objects` have
    spawned; returns summed metrics, success rate, throughput and sim speed.
    progress: optional callable(objects_resolved_so_far) for a progress bar."""
    cfg = cfg or EnvConfig()
    total, steps, wall0 = Metrics(), 0, time.perf_counter()
    env = None
    episode = 0
    while total.spawned < objects:
        n = min(per_episode, objects - total.spawned)
        ep_cfg = replace(cfg, episode_objects=n, max_episode_s=max(cfg.max_episode_s, 10.0 * n))
        env = ConveyorSortEnv(ep_cfg) if env is None or env.cfg != ep_cfg else env
        expert = ScriptedExpert(ep_cfg.cell, env.tokenizer_cfg)
        obs, info = env.reset(seed=seed * 100_003 + episode)
        done = truncated = False
        while not (done or truncated):
            obs, _, done, truncated, info = env.step(expert.act(obs))
            steps += 1
        m = env.cell.metrics
        for k in COUNTS:
            setattr(total, k, getattr(total, k) + getattr(m, k))
        total.elapsed_s += m.elapsed_s
        episode += 1
        if progress is not None:
            progress(total.resolved)
    wall = time.perf_counter() - wall0
    return {**total.as_dict(), "episodes": episode, "env_steps": steps,
            "sim_s_per_wall_s": total.elapsed_s / wall if wall > 0 else 0.0,
            "belt_speed": cfg.cell.belt_speed, "spawn_interval_s": list(cfg.cell.spawn_interval_s)}
