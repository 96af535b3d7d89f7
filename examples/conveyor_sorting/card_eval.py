"""Measure a model directory's sorting success per exit depth and write it into card.json.

    python -m examples.conveyor_sorting.card_eval models/zoo/conveyor-v1 [--episodes 5]

Conditions: instructions seen in training at the default belt speed; the held-out
instruction(s) named in the card; belt speeds never trained on (0.25 and 0.35 m/s, full
depth). The scripted expert runs the same episodes as the reference. Lockstep, seeded.
"""
from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from .config import EnvConfig
from .evaluate import expert_factory, run_policy
from .policy_adapter import model_factory

KEYS = ("spawned", "correct", "wrong", "missed", "dropped", "success_rate")


def _summary(r: dict) -> dict:
    return {k: r[k] for k in KEYS}


def card_eval(model_dir: str, *, episodes: int = 5, per_episode: int = 20, seed: int = 7000,
              speeds=(0.25, 0.35)) -> dict:
    card_path = Path(model_dir) / "card.json"
    card = json.loads(card_path.read_text())
    held = card.get("training", {}).get("held_out_instructions") or []
    seen = [list(p) for p in itertools.permutations(range(3)) if list(p) not in held]
    console = Console()
    out: dict = {"episodes": episodes, "objects_per_episode": per_episode, "seed": seed,
                 "seen_instructions": {}, "held_out_instructions": {}, "belt_speed": {}}
    factory = lambda **kw: model_factory(model_dir, **kw)  # noqa: E731
    depths = card["config"].get("exits", []) + [card["config"]["n_layer"]]
    common = dict(episodes=episodes, per_episode=per_episode, seed=seed)
    out["expert_seen"] = _summary(run_policy(expert_factory, instructions=seen, **common))
    for d in depths:
        r = run_policy(factory(exit_depth=d), instructions=seen, **common)
        out["seen_instructions"][str(d)] = _summary(r)
        console.print(f"depth {d} seen: {r['success_rate']:.3f}")
        if held:
            r = run_policy(factory(exit_depth=d), instructions=held, **common)
            out["held_out_instructions"][str(d)] = _summary(r)
            console.print(f"depth {d} held-out: {r['success_rate']:.3f}")
    for v in speeds:
        cfg = replace(EnvConfig(), cell=replace(EnvConfig().cell, belt_speed=v))
        r = run_policy(factory(), instructions=seen, cfg=cfg, **common)
        out["belt_speed"][str(v)] = _summary(r)
        console.print(f"belt {v} m/s: {r['success_rate']:.3f}")
    card["success"] = out
    card["accuracy"] = {d: s["success_rate"] for d, s in out["seen_instructions"].items()}
    card_path.write_text(json.dumps(card, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--objects-per-episode", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7000)
    a = ap.parse_args(argv)
    print(json.dumps(card_eval(a.model, episodes=a.episodes, per_episode=a.objects_per_episode,
                               seed=a.seed), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
