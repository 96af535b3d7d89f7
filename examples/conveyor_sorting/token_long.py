"""conveyor-v1-long: the action-token policy with 16 waypoints (800 ms), trained to continue
a committed prefix (real-time chunking: the node forces the committed waypoints' tokens as
the chunk's first tokens).

    python -m examples.conveyor_sorting.token_long COMMAND ...   (COMMAND and its options:)
      warm --checkpoint models/zoo/conveyor-v1/policy --out run/warm/policy [--max-ctx 96]
      delayed --data clean.npz dart.npz --out delayed.npz [--max-delay 6] [--seed 0]
      eval --model models/zoo/conveyor-v1 models/zoo/conveyor-v1-long [--episodes 1]
          [--per-episode 10] [--seed 7000]      (lockstep success and chunk cost, same run)

The recipe (the card's lineage has the exact commands):
  1. collect the scripted expert planning 16 waypoints ahead:
     `python -m examples.conveyor_sorting.flow_policy collect` (clean, and DART-noised);
  2. `delayed`: rows whose observation is d old (d = k periods, k uniform in 1..max-delay)
     and whose first k waypoints are what the robot executed meanwhile (each later row's
     first waypoint), the rest the expert's plan from the row k periods on: what the node
     sees under real-time chunking (the committed prefix forced, the rest decoded);
  3. `warm`: conveyor-v1's weights with the context grown from 64 to 96 positions (a
     16-waypoint chunk is 64 action tokens after the 32-token prefix); each new action
     position starts as the last waypoint's position of the same dimension;
  4. `python -m models.train --init run/warm/policy --data clean.npz dart.npz delayed.npz`
     (teacher forcing on every row: a prefix of the expert's own chunk is a committed
     prefix too), then `rtinfer export` and card_eval as for conveyor-v1.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

TOKEN_KEYS = ("instruction_tokens", "obs_tokens")
META_KEYS = ("tokenizer_config", "obs_tokens_spec")


def delayed_rows(episode: np.ndarray, actions: np.ndarray, k: np.ndarray) -> tuple:
    """For rows i with a delay of k[i] periods (k >= 1): (kept row indices, their chunks).

    episode (N,) and actions (N, H, D) are consecutive env steps (one period apart). Row i's
    new chunk has waypoint j due at t_i + (j + 1) periods; the robot executed row i + j's
    first waypoint then (j < k), and the expert's plan from row i + k covers the rest:
    chunk[j] = actions[i + j, 0] for j < k, actions[i + k, j - k] for j >= k.
    Rows whose i + k falls past their episode's end are left out."""
    n, h = actions.shape[:2]
    i = np.arange(n)
    later = np.minimum(i + k, n - 1)
    keep = np.flatnonzero((i + k < n) & (episode[later] == episode[i]))
    out = np.empty((len(keep), *actions.shape[1:]), actions.dtype)
    for r, (row, d) in enumerate(zip(keep, k[keep])):
        out[r, :d] = actions[row:row + d, 0]
        out[r, d:] = actions[row + d, :h - d]
    return keep, out


def delayed(paths: list[str], out: str, max_delay: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    parts: dict[str, list] = {k: [] for k in (*TOKEN_KEYS, "action_tokens")}
    meta = None
    for p in paths:
        with np.load(p, allow_pickle=False) as z:
            if meta is None:
                meta = {k: z[k] for k in META_KEYS}
            k = rng.integers(1, max_delay + 1, len(z["episode"]))
            keep, chunks = delayed_rows(z["episode"], z["action_tokens"], k)
            for key in TOKEN_KEYS:
                parts[key].append(z[key][keep])
            parts["action_tokens"].append(chunks)
    arrays = {key: np.concatenate(v) for key, v in parts.items()}
    np.savez_compressed(out, **arrays, **meta)
    return {"rows": len(arrays["obs_tokens"]), "max_delay": max_delay, "seed": seed,
            "data": list(paths)}


def warm(checkpoint_path: str, out: str, max_ctx: int, waypoint_tokens: int = 4) -> dict:
    """A copy of the checkpoint with max_ctx positions; position p past the old context
    starts as the old last waypoint's position of the same action dimension."""
    import torch

    from models import checkpoint
    from models.policy import Policy
    ck = checkpoint.load(checkpoint_path)
    old = ck.cfg.max_ctx
    if max_ctx <= old:
        raise SystemExit(f"warm: --max-ctx {max_ctx} must exceed the checkpoint's {old}")
    model = Policy(replace(ck.cfg, max_ctx=max_ctx))
    state = ck.model.state_dict()
    wpe = state["wpe.weight"]
    last = old - waypoint_tokens  # the first position of the old last waypoint
    grown = torch.cat([wpe, torch.stack([wpe[last + (p - old) % waypoint_tokens]
                                         for p in range(old, max_ctx)])])
    model.load_state_dict({**state, "wpe.weight": grown}, strict=True)
    meta = {**ck.meta, "grown_from": {"checkpoint": checkpoint_path, "max_ctx": [old, max_ctx]}}
    checkpoint.save(out, model, ck.vocab, meta)
    return {"out": out, "max_ctx": [old, max_ctx]}


def evaluate(models: list[str], *, episodes: int, per_episode: int, seed: int) -> dict:
    """Lockstep success (every instruction, the same scenes for every model) and each
    chunk's compute at full quality: wall and this thread's CPU ms (ONNX Runtime, 1 thread),
    p50 / p99 over every chunk of the run."""
    from .config import EnvConfig
    from .evaluate import all_instructions, run_per_instruction
    from .policy_adapter import model_factory
    out = {}
    for path in models:
        made, factory = [], model_factory(path)

        def make(env, factory=factory, made=made):
            made.append(factory(env))
            return made[-1]
        horizon = json.loads((Path(path) / "tokenizer.json").read_text())["horizon"]
        r = run_per_instruction(make, all_instructions(), episodes=episodes,
                                per_episode=per_episode, seed=seed,
                                cfg=replace(EnvConfig(), horizon=horizon))
        wall = np.concatenate([p.chunk_ns for p in made]) / 1e6
        cpu = np.concatenate([p.chunk_cpu_ns for p in made]) / 1e6
        out[path] = {"horizon": horizon, **{k: r[k] for k in (
            "spawned", "correct", "wrong", "missed", "dropped", "success_rate",
            "min_success_rate")}, "chunks": len(wall),
            "chunk_ms": {"p50": round(float(np.median(wall)), 3),
                         "p99": round(float(np.percentile(wall, 99)), 3)},
            "chunk_cpu_ms": {"p50": round(float(np.median(cpu)), 3),
                             "p99": round(float(np.percentile(cpu, 99)), 3)}}
        print(json.dumps({path: out[path]}), flush=True)
    return {"episodes_per_instruction": episodes, "objects_per_episode": per_episode,
            "seed": seed, "models": out, "load": Path("/proc/loadavg").read_text().split()[:3]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warm", help="grow a checkpoint's context for longer chunks")
    w.add_argument("--checkpoint", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--max-ctx", type=int, default=96)
    d = sub.add_parser("delayed", help="rows with an observation d old and a committed prefix")
    d.add_argument("--data", nargs="+", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--max-delay", type=int, default=6, help="largest d, in periods")
    d.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("eval", help="lockstep success and chunk cost of models, same run")
    e.add_argument("--model", nargs="+", required=True)
    e.add_argument("--episodes", type=int, default=1, help="per instruction")
    e.add_argument("--per-episode", type=int, default=10, help="objects per episode")
    e.add_argument("--seed", type=int, default=7000)
    a = ap.parse_args(argv)
    if a.cmd == "warm":
        r = warm(a.checkpoint, a.out, a.max_ctx)
    elif a.cmd == "eval":
        r = evaluate(a.model, episodes=a.episodes, per_episode=a.per_episode, seed=a.seed)
    else:
        r = delayed(a.data, a.out, a.max_delay, a.seed)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
