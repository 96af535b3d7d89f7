"""Measure a policy (anything with reset() and act(obs) -> (H, D) chunk) in the lockstep env.

`run_policy` runs whole episodes (a new instruction each); `run_expert` runs the scripted
expert until a number of objects has spawned. Both return summed metrics, success rate,
throughput and sim speed.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Protocol

import numpy as np

from .config import EnvConfig
from .env import ConveyorSortEnv
from .expert import ScriptedExpert
from .metrics import Metrics

COUNTS = ("spawned", "picked", "correct", "wrong", "missed", "dropped", "pool_exhausted")


class Policy(Protocol):
    def reset(self) -> None: ...
    def act(self, obs: dict) -> np.ndarray: ...


def run_policy(make_policy: Callable[[ConveyorSortEnv], Policy], *, episodes: int,
               per_episode: int = 20, seed: int = 0, cfg: EnvConfig | None = None,
               progress: Callable[[int], None] | None = None,
               instructions: list[list[int]] | None = None) -> dict:
    """`episodes` episodes of `per_episode` objects each; make_policy(env) builds the policy
    once. progress: optional callable(episodes_done). instructions: episode i uses
    instructions[i % len] (class -> bin permutations) instead of a seeded random one."""
    cfg = replace(cfg or EnvConfig(), episode_objects=per_episode)
    cfg = replace(cfg, max_episode_s=max(cfg.max_episode_s, 10.0 * per_episode))
    env = ConveyorSortEnv(cfg)
    policy = make_policy(env)
    total, steps, wall0 = Metrics(), 0, time.perf_counter()
    for episode in range(episodes):
        policy.reset()
        opts = {"instruction": instructions[episode % len(instructions)]} if instructions else None
        obs, info = env.reset(seed=seed * 100_003 + episode, options=opts)
        done = truncated = False
        while not (done or truncated):
            obs, _, done, truncated, info = env.step(policy.act(obs))
            steps += 1
        m = env.cell.metrics
        for k in COUNTS:
            setattr(total, k, getattr(total, k) + getattr(m, k))
        total.elapsed_s += m.elapsed_s
        if progress is not None:
            progress(episode + 1)
    wall = time.perf_counter() - wall0
    return {**total.as_dict(), "episodes": episodes, "env_steps": steps,
            "sim_s_per_wall_s": total.elapsed_s / wall if wall > 0 else 0.0,
            "belt_speed": cfg.cell.belt_speed, "spawn_interval_s": list(cfg.cell.spawn_interval_s)}


def expert_factory(env: ConveyorSortEnv) -> ScriptedExpert:
    return ScriptedExpert(env.cfg.cell, env.tokenizer_cfg)


def run_expert(objects: int = 200, *, seed: int = 0, per_episode: int = 20,
               cfg: EnvConfig | None = None, progress=None) -> dict:
    """The scripted expert over at least `objects` objects (whole episodes)."""
    episodes = max(1, -(-objects // per_episode))
    return run_policy(expert_factory, episodes=episodes, per_episode=per_episode, seed=seed,
                      cfg=cfg, progress=progress)


def evaluate(policy: str, *, episodes: int, per_episode: int = 20, seed: int = 0,
             belt_speed: float | None = None, progress=None, **policy_opts) -> dict:
    """`rtinfer eval`: policy is "expert" or a model directory (see policy_adapter.py)."""
    cfg = EnvConfig()
    if belt_speed is not None:
        cfg = replace(cfg, cell=replace(cfg.cell, belt_speed=belt_speed))
    if policy == "expert":
        factory = expert_factory
    else:
        from .policy_adapter import model_factory
        factory = model_factory(policy, **policy_opts)
    r = run_policy(factory, episodes=episodes, per_episode=per_episode, seed=seed, cfg=cfg,
                   progress=progress)
    r["policy"] = policy
    return r


def main(argv=None) -> None:
    """`python -m examples.conveyor_sorting.evaluate`: the scripted expert's success."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Measure the scripted expert's sorting success.")
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--belt-speed", type=float, default=None)
    a = ap.parse_args(argv)
    cfg = EnvConfig()
    if a.belt_speed is not None:
        cfg = replace(cfg, cell=replace(cfg.cell, belt_speed=a.belt_speed))
    print(json.dumps(run_expert(a.objects, seed=a.seed, cfg=cfg), indent=1))


if __name__ == "__main__":
    main()
