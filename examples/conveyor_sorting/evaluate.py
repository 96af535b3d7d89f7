"""Measure a policy (anything with reset() and act(obs) -> (H, D) chunk) in the lockstep env.

`run_policy` runs whole episodes (a new instruction each); `run_expert` runs the scripted
expert until a number of objects has spawned. Both return summed metrics, success rate,
throughput and sim speed. `run_per_instruction` runs the same episode seeds once per
instruction (class -> bin permutation) and reports success per instruction and overall.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import numpy as np

from rtinfer.model.chunk_model import load_model

from .config import EnvConfig
from .env import ConveyorSortEnv
from .expert import ScriptedExpert
from .metrics import Metrics

COUNTS = ("spawned", "picked", "correct", "wrong", "missed", "dropped", "pool_exhausted")
SUMMARY = ("spawned", "correct", "wrong", "missed", "dropped", "success_rate")


def all_instructions(num_classes: int = 3) -> list[list[int]]:
    """Every class -> bin permutation, in lexicographic order (six for three classes)."""
    return [list(p) for p in itertools.permutations(range(num_classes))]


def instruction_key(perm) -> str:
    """ "2,0,1": how an instruction is named in results, card.json and on the CLI."""
    return ",".join(str(int(c)) for c in perm)


def parse_instructions(spec, num_classes: int = 3) -> list[list[int]] | None:
    """None -> None (a seeded random instruction per episode); "all" -> every permutation;
    "2,0,1" or a list of such strings / int lists -> those. ValueError names a bad one."""
    if spec is None:
        return None
    items = [spec] if isinstance(spec, str) else list(spec)
    if items == ["all"]:
        return all_instructions(num_classes)
    valid = all_instructions(num_classes)
    out = []
    for item in items:
        try:
            perm = (
                [int(c) for c in item.split(",")]
                if isinstance(item, str)
                else [int(c) for c in item]
            )
        except ValueError:
            perm = None
        if perm not in valid:
            raise ValueError(
                f"instruction {item!r} is not a permutation of "
                f"{instruction_key(range(num_classes))}; use e.g. 2,0,1 or 'all'"
            )
        out.append(perm)
    return out


class Policy(Protocol):
    def reset(self) -> None: ...
    def act(self, obs: dict) -> np.ndarray: ...


def run_policy(
    make_policy: Callable[[ConveyorSortEnv], Policy],
    *,
    episodes: int,
    per_episode: int = 20,
    seed: int = 0,
    cfg: EnvConfig | None = None,
    progress: Callable[[int], None] | None = None,
    instructions: list[list[int]] | None = None,
) -> dict:
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
    return {
        **total.as_dict(),
        "episodes": episodes,
        "env_steps": steps,
        "sim_s_per_wall_s": total.elapsed_s / wall if wall > 0 else 0.0,
        "belt_speed": cfg.cell.belt_speed,
        "spawn_interval_s": list(cfg.cell.spawn_interval_s),
    }


def run_per_instruction(
    make_policy: Callable[[ConveyorSortEnv], Policy],
    instructions: list[list[int]],
    *,
    episodes: int,
    progress: Callable[[int], None] | None = None,
    **run_opts,
) -> dict:
    """`episodes` episodes for each instruction, in lockstep: every instruction runs the same
    episode seeds (the same scenes). Returns the summed counts and overall success_rate, plus
    per_instruction {"2,0,1": counts + success_rate} and min_success_rate (the worst one)."""
    per, total, done = {}, dict.fromkeys(COUNTS, 0), 0
    for perm in instructions:
        tick = None if progress is None else (lambda e, d=done: progress(d + e))
        r = run_policy(
            make_policy, episodes=episodes, instructions=[perm], progress=tick, **run_opts
        )
        per[instruction_key(perm)] = {k: r[k] for k in SUMMARY}
        for k in COUNTS:
            total[k] += r[k]
        done += episodes
    resolved = total["correct"] + total["wrong"] + total["missed"] + total["dropped"]
    return {
        **total,
        "resolved": resolved,
        "success_rate": total["correct"] / resolved if resolved else 1.0,
        "episodes": episodes * len(instructions),
        "episodes_per_instruction": episodes,
        "per_instruction": per,
        "min_success_rate": min(v["success_rate"] for v in per.values()),
    }


class LateChunks:
    """A policy whose chunks miss their deadline a `late` fraction of cycles (seeded): the
    policy still computes each one (its own state moves on, as a node's does), but a late
    chunk is refused, as the controller refuses one past its deadline, and the robot keeps
    playing what is left of the last chunk it took (its waypoints keep their times); once
    that is spent it holds its last waypoint. A lockstep stand-in for a loaded host, where
    a longer chunk leaves more runway. refused: the late cycles so far."""

    def __init__(self, policy: Policy, late: float, seed: int = 0):
        if not 0.0 <= late < 1.0:
            raise ValueError(f"late must be in [0, 1), got {late}")
        self.policy, self.late, self.rng = policy, late, np.random.default_rng(seed)
        self.taken, self.age, self.refused = None, 0, 0

    def reset(self) -> None:
        self.policy.reset()
        self.taken, self.age = None, 0

    def act(self, obs: dict) -> np.ndarray:
        chunk = self.policy.act(obs)
        if self.taken is None or self.rng.random() >= self.late:
            self.taken, self.age = chunk, 0
            return chunk
        self.refused, self.age = self.refused + 1, self.age + 1
        return self.taken[min(self.age, len(self.taken) - 1) :]


def expert_factory(env: ConveyorSortEnv) -> ScriptedExpert:
    return ScriptedExpert(env.cfg.cell, env.tokenizer_cfg)


def run_expert(
    objects: int = 200,
    *,
    seed: int = 0,
    per_episode: int = 20,
    cfg: EnvConfig | None = None,
    progress=None,
) -> dict:
    """The scripted expert over at least `objects` objects (whole episodes)."""
    episodes = max(1, -(-objects // per_episode))
    return run_policy(
        expert_factory,
        episodes=episodes,
        per_episode=per_episode,
        seed=seed,
        cfg=cfg,
        progress=progress,
    )


def camera_config(cfg: EnvConfig, model) -> EnvConfig:
    """cfg with the camera that a loaded model's observation spec reads (its image input's
    camera, rendered at that input's H, W), so each observation carries the frame the graph
    takes; cfg unchanged for a vectors-only model. ValueError if it reads several cameras:
    the cell renders one."""
    images = getattr(model.obs, "images", None)  # an action-token model's obs reads none
    if not images:
        return cfg
    cams = {
        cam: shape
        for key, shape in zip(model.obs.keys, model.obs.shapes)
        if key in images
        for cam in images[key]
    }
    if len(cams) > 1:
        raise ValueError(
            f"{model.path}: reads cameras {sorted(cams)}; the conveyor cell renders one (overhead)"
        )
    ((camera, shape),) = cams.items()
    return replace(cfg, camera=camera, frame_hw=tuple(shape[-3:-1]))


def evaluate(
    policy: str,
    *,
    episodes: int,
    per_episode: int = 20,
    seed: int = 0,
    belt_speed: float | None = None,
    progress=None,
    instructions=None,
    **policy_opts,
) -> dict:
    """`rtinfer eval`: policy is "expert" or a model directory (see policy_adapter.py); a
    model that reads a camera gets the env's camera (camera_config).
    instructions: None (a seeded random instruction per episode), "all" or a list such as
    ["2,0,1"]: then `episodes` episodes per instruction, with "per_instruction" success and
    "min_success_rate" in the result (see run_per_instruction)."""
    cfg = EnvConfig()
    perms = parse_instructions(instructions, cfg.cell.num_classes)
    if belt_speed is not None:
        cfg = replace(cfg, cell=replace(cfg.cell, belt_speed=belt_speed))
    if policy == "expert":
        factory = expert_factory
    else:
        from .policy_adapter import model_factory

        factory = model_factory(policy, **policy_opts)
        model = load_model(policy)
        cfg = camera_config(cfg, model)
        if getattr(model, "kind", None) == "flow":  # the env's chunks as long as the policy's
            cfg = replace(cfg, horizon=model.action.horizon)
    common = dict(episodes=episodes, per_episode=per_episode, seed=seed, cfg=cfg, progress=progress)
    r = (
        run_policy(factory, **common)
        if perms is None
        else run_per_instruction(factory, perms, **common)
    )
    r["policy"] = policy
    return r


def main(argv=None) -> None:
    """`python -m examples.conveyor_sorting.evaluate`: the scripted expert's success; with
    --policy, a model directory's (per instruction with --instructions all)."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Measure the scripted expert's sorting success.")
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--belt-speed", type=float, default=None)
    ap.add_argument("--policy", default=None, help='"expert" or a model directory')
    ap.add_argument(
        "--episodes", type=int, default=4, help="with --policy: episodes (per instruction)"
    )
    ap.add_argument(
        "--instructions",
        action="append",
        default=None,
        help='"all" or a permutation such as 2,0,1 (repeatable)',
    )
    a = ap.parse_args(argv)
    if a.policy or a.instructions:
        try:
            r = evaluate(
                a.policy or "expert",
                episodes=a.episodes,
                seed=a.seed,
                belt_speed=a.belt_speed,
                instructions=a.instructions,
            )
        except ValueError as e:
            raise SystemExit(f"evaluate: {e}") from None
        print(json.dumps(r, indent=1))
        return
    cfg = EnvConfig()
    if a.belt_speed is not None:
        cfg = replace(cfg, cell=replace(cfg.cell, belt_speed=a.belt_speed))
    print(json.dumps(run_expert(a.objects, seed=a.seed, cfg=cfg), indent=1))


if __name__ == "__main__":
    main()
