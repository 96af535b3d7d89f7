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
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from .config import EnvConfig
from .evaluate import SUMMARY, all_instructions, expert_factory, instruction_key, \
    run_per_instruction
from .policy_adapter import model_factory

SEED_STRIDE = 100_003  # run_policy: episode e of seed s resets with s * SEED_STRIDE + e


def _summary(r: dict) -> dict:
    """Overall counts plus per_instruction, without the bookkeeping fields."""
    return {**{k: r[k] for k in SUMMARY}, "per_instruction": r["per_instruction"],
            "min_success_rate": r["min_success_rate"]}


def card_eval(model_dir: str, *, episodes: int = 5, short_episodes: int = 2,
              per_episode: int = 20, seed: int = 7000, speeds=(0.25, 0.35)) -> dict:
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
    out: dict = {"episodes": episodes, "short_episodes": short_episodes,
                 "objects_per_episode": per_episode, "seed": seed,
                 "held_out_scenes": {
                     "episode_seeds": [seed * SEED_STRIDE + e for e in range(n_seeds)],
                     "belt_speeds": list(speeds)},
                 "trained_instructions": [instruction_key(p) for p in perms if p not in held],
                 "seen_instructions": {}, "held_out_instructions": {}, "belt_speed": {}}
    common = dict(per_episode=per_episode, seed=seed)
    out["expert"] = _summary(run_per_instruction(expert_factory, perms, episodes=episodes,
                                                 **common))
    for d in depths:
        r = run_per_instruction(factory(exit_depth=d), perms,
                                episodes=episodes if d == full else short_episodes, **common)
        out["seen_instructions"][str(d)] = _summary(r)
        console.print(f"depth {d}: {r['success_rate']:.3f} overall, worst instruction "
                      f"{r['min_success_rate']:.3f}")
        if held:
            out["held_out_instructions"][str(d)] = {
                k: v for k, v in r["per_instruction"].items() if k in map(instruction_key, held)}
    for v in speeds:
        cfg = replace(EnvConfig(), cell=replace(EnvConfig().cell, belt_speed=v))
        r = run_per_instruction(factory(), perms, episodes=short_episodes, cfg=cfg, **common)
        out["belt_speed"][str(v)] = _summary(r)
        console.print(f"belt {v} m/s: {r['success_rate']:.3f} overall, worst instruction "
                      f"{r['min_success_rate']:.3f}")
    card["success"] = out
    card["accuracy"] = {d: s["success_rate"] for d, s in out["seen_instructions"].items()}
    card_path.write_text(json.dumps(card, indent=1))
    return out


def precision_eval(model_dir: str, precision: str, *, episodes: int = 5, per_episode: int = 20,
                   seed: int = 7000) -> dict:
    """Full-depth success of one graph set (int8, int4, fp16) on card_eval's seeds, written
    into card.json "quantised"[precision]["success"] with fp32's rate from the card."""
    card_path = Path(model_dir) / "card.json"
    card = json.loads(card_path.read_text())
    full = str(card["config"]["n_layer"])
    r = run_per_instruction(model_factory(model_dir, precision=precision),
                            all_instructions(EnvConfig().cell.num_classes),
                            episodes=episodes, per_episode=per_episode, seed=seed)
    ref = card.get("success", {})  # fp32's, when card_eval ran the same episodes
    same = all(ref.get(k) == v for k, v in
               (("seed", seed), ("episodes", episodes), ("objects_per_episode", per_episode)))
    out = {"depth": int(full), "episodes": episodes, "objects_per_episode": per_episode,
           "seed": seed, **_summary(r), "float32_success_rate":
           ref["seen_instructions"][full]["success_rate"] if same else None}
    Console().print(f"{precision}: {r['success_rate']:.3f} overall (fp32 on these episodes: "
                    f"{out['float32_success_rate']}), worst instruction {r['min_success_rate']:.3f}")
    card.setdefault("quantised", {}).setdefault(precision, {})["success"] = out
    card_path.write_text(json.dumps(card, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--episodes", type=int, default=5, help="per instruction, full depth")
    ap.add_argument("--short-episodes", type=int, default=2,
                    help="per instruction, early exits and other belt speeds")
    ap.add_argument("--objects-per-episode", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7000)
    ap.add_argument("--precision", default=None,
                    help="int8, int4 or fp16: that graph set at full depth only (card 'quantised')")
    a = ap.parse_args(argv)
    if a.precision and a.precision != "fp32":
        print(json.dumps(precision_eval(a.model, a.precision, episodes=a.episodes,
                                        per_episode=a.objects_per_episode, seed=a.seed), indent=1))
        return 0
    print(json.dumps(card_eval(a.model, episodes=a.episodes, short_episodes=a.short_episodes,
                               per_episode=a.objects_per_episode, seed=a.seed), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
