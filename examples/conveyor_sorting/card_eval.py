"""Measure a model directory's sorting success per instruction and exit depth, and write it
into card.json.

    python -m examples.conveyor_sorting.card_eval models/zoo/conveyor-v1 [--episodes 5]

Every condition runs each of the six class -> bin instructions on the same episode seeds
(lockstep, seeded): the full depth with --episodes per instruction, the early exits and the
belt speeds never trained on (0.25 and 0.35 m/s, full depth) with --short-episodes. The
scenes are held out of training: run_policy seeds episode e as seed * 100003 + e (collect.py
uses seed * 1000003 + e; the recipe's collection seeds are 200..303). Instructions named in
the card's training.held_out_instructions are also reported apart. The scripted expert runs
the same full-depth episodes as the reference.

    python -m examples.conveyor_sorting.card_eval models/zoo/conveyor-v1 --precision int8

runs a quantised graph set (models.quantise) at full depth on the same seeds instead, and
writes its success beside fp32's into the card's "quantised" entry for that precision.

    python -m examples.conveyor_sorting.card_eval models/zoo/conveyor-v1 --levels [--late 0.3]

measures every candidate budget level (rtinfer.inference.budget.candidate_levels, plus each
exit at the full chunk) as the node runs it, on the same seeds: its success per instruction
and its chunk's compute (median CPU ms of this thread, in the same run), with `--late` of
the cycles' chunks refused (evaluate.LateChunks: the robot keeps the last chunk it took).
It writes them into the card's "level_success", from which default_levels orders the
ladder (budget.order_by_success).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console

from rtinfer.bench.decode import token_stream
from rtinfer.inference.budget import BudgetLevel, candidate_levels, level_key
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.directory import ModelDir

from .config import EnvConfig
from .evaluate import (
    SUMMARY,
    LateChunks,
    all_instructions,
    expert_factory,
    instruction_key,
    run_per_instruction,
)
from .policy_adapter import ModelPolicy, model_factory

SEED_STRIDE = 100_003  # run_policy: episode e of seed s resets with s * SEED_STRIDE + e


def _summary(r: dict) -> dict:
    """Overall counts plus per_instruction, without the bookkeeping fields."""
    return {
        **{k: r[k] for k in SUMMARY},
        "per_instruction": r["per_instruction"],
        "min_success_rate": r["min_success_rate"],
    }


def card_eval(
    model_dir: str,
    *,
    episodes: int = 5,
    short_episodes: int = 2,
    per_episode: int = 20,
    seed: int = 7000,
    speeds=(0.25, 0.35),
) -> dict:
    """Returns the card's new "success" section (also written into card.json)."""
    card_path = Path(model_dir) / "card.json"
    card = json.loads(card_path.read_text())
    held = [list(h) for h in card.get("training", {}).get("held_out_instructions") or []]
    perms = all_instructions(EnvConfig().cell.num_classes)
    console = Console()
    factory = lambda **kw: model_factory(model_dir, **kw)  # noqa: E731
    full = card["config"]["n_layer"]
    depths = card["config"].get("exits", []) + [full]
    n_seeds = max(episodes, short_episodes)
    out: dict = {
        "episodes": episodes,
        "short_episodes": short_episodes,
        "objects_per_episode": per_episode,
        "seed": seed,
        "held_out_scenes": {
            "episode_seeds": [seed * SEED_STRIDE + e for e in range(n_seeds)],
            "belt_speeds": list(speeds),
        },
        "trained_instructions": [instruction_key(p) for p in perms if p not in held],
        "seen_instructions": {},
        "held_out_instructions": {},
        "belt_speed": {},
    }
    common = dict(per_episode=per_episode, seed=seed)
    out["expert"] = _summary(
        run_per_instruction(expert_factory, perms, episodes=episodes, **common)
    )
    for d in depths:
        r = run_per_instruction(
            factory(exit_depth=d),
            perms,
            episodes=episodes if d == full else short_episodes,
            **common,
        )
        out["seen_instructions"][str(d)] = _summary(r)
        console.print(
            f"depth {d}: {r['success_rate']:.3f} overall, worst instruction "
            f"{r['min_success_rate']:.3f}"
        )
        if held:
            out["held_out_instructions"][str(d)] = {
                k: v for k, v in r["per_instruction"].items() if k in map(instruction_key, held)
            }
    for v in speeds:
        cfg = replace(EnvConfig(), cell=replace(EnvConfig().cell, belt_speed=v))
        r = run_per_instruction(factory(), perms, episodes=short_episodes, cfg=cfg, **common)
        out["belt_speed"][str(v)] = _summary(r)
        console.print(
            f"belt {v} m/s: {r['success_rate']:.3f} overall, worst instruction "
            f"{r['min_success_rate']:.3f}"
        )
    card["success"] = out
    card["accuracy"] = {d: s["success_rate"] for d, s in out["seen_instructions"].items()}
    card_path.write_text(json.dumps(card, indent=1))
    return out


def precision_eval(
    model_dir: str, precision: str, *, episodes: int = 5, per_episode: int = 20, seed: int = 7000
) -> dict:
    """Full-depth success of one graph set (int8, int4, fp16) on card_eval's seeds, written
    into card.json "quantised"[precision]["success"] with fp32's rate from the card."""
    card_path = Path(model_dir) / "card.json"
    card = json.loads(card_path.read_text())
    full = str(card["config"]["n_layer"])
    r = run_per_instruction(
        model_factory(model_dir, precision=precision),
        all_instructions(EnvConfig().cell.num_classes),
        episodes=episodes,
        per_episode=per_episode,
        seed=seed,
    )
    ref = card.get("success", {})  # fp32's, when card_eval ran the same episodes
    same = all(
        ref.get(k) == v
        for k, v in (("seed", seed), ("episodes", episodes), ("objects_per_episode", per_episode))
    )
    out = {
        "depth": int(full),
        "episodes": episodes,
        "objects_per_episode": per_episode,
        "seed": seed,
        **_summary(r),
        "float32_success_rate": ref["seen_instructions"][full]["success_rate"] if same else None,
    }
    Console().print(
        f"{precision}: {r['success_rate']:.3f} overall (fp32 on these episodes: "
        f"{out['float32_success_rate']}), worst instruction "
        f"{r['min_success_rate']:.3f}"
    )
    card.setdefault("quantised", {}).setdefault(precision, {})["success"] = out
    card_path.write_text(json.dumps(card, indent=1))
    return out


def level_candidates(md: ModelDir, k_verify: int) -> list[BudgetLevel]:
    """candidate_levels, then each exit at the full chunk (not in the static ladder: its
    place, if any, comes from its measurement)."""
    levels = candidate_levels(md, k_verify)
    H = md.tokenizer.horizon
    extra = [BudgetLevel(e, 0, H) for e in md.config.get("exits", [])]
    return levels + [lv for lv in extra if lv not in levels]


def _key(entry: dict) -> tuple:
    """A level_success entry's budget.level_key."""
    return level_key(
        BudgetLevel(entry["depth"], entry["spec_len"], entry["chunk"], None, entry.get("gate"))
    )


def level_costs(
    md: ModelDir, levels: list, *, cycles: int = 300, rounds: int = 3, run_length: int = 10
) -> list[float]:
    """Each level's chunk compute (prefill + decode; median CPU ms of this thread) on the
    model's recorded stream, all levels in one run: in each round they take turns in runs of
    `run_length` consecutive cycles, the order rotating (as rtinfer bench decode does), each
    level with a runner of its own (its drafter reuses its own previous chunk). What load
    does to the host then weighs on every level alike."""
    stream = list(token_stream(md, cycles, 0))
    runners = [TokenRunner(md, backend_opts={"threads": 1}) for _ in levels]
    period, spent = md.tokenizer.period_ns, [[] for _ in levels]
    order = list(range(len(levels)))
    for r in range(rounds):
        for n, first in enumerate(range(0, len(stream), run_length)):
            turn = (r + n) % len(order)
            for li in order[turn:] + order[:turn]:
                for i in range(first, min(first + run_length, len(stream))):
                    c0 = time.thread_time_ns()
                    runners[li].run(*stream[i], i * period, levels[li])
                    spent[li].append(time.thread_time_ns() - c0)
    return [float(np.median(s)) / 1e6 for s in spent]


def level_eval(
    model_dir: str,
    *,
    episodes: int = 3,
    per_episode: int = 20,
    seed: int = 7000,
    late: float = 0.0,
    only=None,
) -> dict:
    """Each candidate level (level_candidates; `only`: their indices) over the six
    instructions, `episodes` each: success and chunk compute; written into card.json
    "level_success" (replacing the entries of the levels measured here)."""
    card_path = Path(model_dir) / "card.json"
    md = ModelDir.load(model_dir)
    perms = all_instructions(EnvConfig().cell.num_classes)
    console, entries = Console(), []
    k_verify = TokenRunner(md, backend_opts={"threads": 1}).decoder.k_verify
    levels = level_candidates(md, k_verify)
    for idx in range(len(levels)) if only is None else only:
        made: list = []

        def factory(env, lv=levels[idx], made=made):
            made.append(ModelPolicy(md, env, level=lv))
            return LateChunks(made[-1], late, seed=seed + len(made)) if late > 0 else made[-1]

        r = run_per_instruction(
            factory, perms, episodes=episodes, per_episode=per_episode, seed=seed
        )
        lv = levels[idx]
        cpu = np.concatenate([p.chunk_cpu_ns for p in made]) / 1e6
        wall = np.concatenate([p.chunk_ns for p in made]) / 1e6
        entries.append(
            {
                "depth": lv.depth,
                "spec_len": lv.spec_len,
                "chunk": lv.chunk,
                "gate": lv.gate,
                **_summary(r),
                "lockstep_chunk_cpu_ms": round(float(np.median(cpu)), 3),
                "lockstep_chunk_ms": round(float(np.median(wall)), 3),
                "chunks": int(cpu.size),
            }
        )
        console.print(
            f"level {idx} {lv}: {r['success_rate']:.3f} overall, worst instruction "
            f"{r['min_success_rate']:.3f}, chunk {np.median(cpu):.2f} ms CPU"
        )
    costs = dict(zip(map(level_key, levels), level_costs(md, levels)))
    for e in entries:
        e["chunk_cpu_ms"] = round(costs[_key(e)], 3)
    card = json.loads(card_path.read_text())
    run = {"episodes": episodes, "objects_per_episode": per_episode, "seed": seed, "late": late}
    old = card.get("level_success", {})
    kept = (
        [e for e in old.get("levels", []) if _key(e) not in set(map(_key, entries))]
        if all(old.get(k) == v for k, v in run.items())
        else []
    )  # other conditions: replaced
    for e in kept:  # the cost of every level is from this run's interleaved measurement
        e["chunk_cpu_ms"] = round(costs.get(_key(e), e["chunk_cpu_ms"]), 3)
    card["level_success"] = {
        **run,
        "cost": "chunk_cpu_ms: median compute of one chunk "
        "(prefill + decode), this thread's CPU ms, "
        "every candidate level interleaved on the "
        "recorded stream (level_costs); "
        "lockstep_chunk_cpu_ms: in its lockstep run",
        "levels": kept + entries,
    }
    card_path.write_text(json.dumps(card, indent=1))
    return card["level_success"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--episodes", type=int, default=5, help="per instruction, full depth")
    ap.add_argument(
        "--short-episodes",
        type=int,
        default=2,
        help="per instruction, early exits and other belt speeds",
    )
    ap.add_argument("--objects-per-episode", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7000)
    ap.add_argument(
        "--precision",
        default=None,
        help="int8, int4, w8a8 or fp16: that graph set at full depth only (card 'quantised')",
    )
    ap.add_argument(
        "--levels",
        nargs="*",
        type=int,
        default=None,
        metavar="I",
        help="measure the candidate budget levels (indices I; none: all), "
        "--episodes per instruction (card 'level_success')",
    )
    ap.add_argument(
        "--late",
        type=float,
        default=0.0,
        help="with --levels: the fraction of chunks refused as late",
    )
    a = ap.parse_args(argv)
    if a.levels is not None:
        print(
            json.dumps(
                level_eval(
                    a.model,
                    episodes=a.episodes,
                    seed=a.seed,
                    late=a.late,
                    per_episode=a.objects_per_episode,
                    only=a.levels or None,
                ),
                indent=1,
            )
        )
        return 0
    if a.precision and a.precision != "fp32":
        print(
            json.dumps(
                precision_eval(
                    a.model,
                    a.precision,
                    episodes=a.episodes,
                    per_episode=a.objects_per_episode,
                    seed=a.seed,
                ),
                indent=1,
            )
        )
        return 0
    print(
        json.dumps(
            card_eval(
                a.model,
                episodes=a.episodes,
                short_episodes=a.short_episodes,
                per_episode=a.objects_per_episode,
                seed=a.seed,
            ),
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
