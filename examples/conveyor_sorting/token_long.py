"""conveyor-v1-long: the action-token policy with 16 waypoints (800 ms), trained to continue
a committed prefix (real-time chunking: the node forces the committed waypoints' tokens as
the chunk's first tokens).

    python -m examples.conveyor_sorting.token_long COMMAND ...   (COMMAND and its options:)
      warm --checkpoint models/zoo/conveyor-v1/policy --out run/warm/policy [--max-ctx 96]
      delayed --data clean.npz dart.npz --out delayed.npz [--max-delay 6] [--seed 0]
      heldout --data heldout.npz --out MODEL_DIR/rtc_rows.npz [--rows 24] [--seed 1]
      finish --state run/train_state.safetensors --init run/warm/policy
          --val heldout.npz heldout_delayed.npz --out run/policy    (a run stopped early)
      card --dir MODEL_DIR --eval eval.json [--max-committed 6] [--lineage lineage.json]
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
        out[r, :d] = actions[row : row + d, 0]
        out[r, d:] = actions[row + d, : h - d]
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
    return {
        "rows": len(arrays["obs_tokens"]),
        "max_delay": max_delay,
        "seed": seed,
        "data": list(paths),
    }


def heldout(path: str, out: str, rows: int, max_delay: int, seed: int) -> dict:
    """`rows` delayed rows of a held-out collection, each with its delay k ("committed"): the
    test set of tests/test_zoo_long.py (the prefix forced, the rest compared)."""
    rng = np.random.default_rng(seed)
    with np.load(path, allow_pickle=False) as z:
        k = rng.integers(1, max_delay + 1, len(z["episode"]))
        keep, chunks = delayed_rows(z["episode"], z["action_tokens"], k)
        pick = np.sort(rng.choice(len(keep), rows, replace=False))
        np.savez_compressed(
            out,
            **{key: z[key][keep[pick]] for key in TOKEN_KEYS},
            action_tokens=chunks[pick],
            committed=k[keep[pick]],
        )
    return {"rows": rows, "max_delay": max_delay, "seed": seed, "data": path}


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
    grown = torch.cat(
        [wpe, torch.stack([wpe[last + (p - old) % waypoint_tokens] for p in range(old, max_ctx)])]
    )
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
        r = run_per_instruction(
            make,
            all_instructions(),
            episodes=episodes,
            per_episode=per_episode,
            seed=seed,
            cfg=replace(EnvConfig(), horizon=horizon),
        )
        wall = np.concatenate([p.chunk_ns for p in made]) / 1e6
        cpu = np.concatenate([p.chunk_cpu_ns for p in made]) / 1e6
        out[path] = {
            "horizon": horizon,
            **{
                k: r[k]
                for k in (
                    "spawned",
                    "correct",
                    "wrong",
                    "missed",
                    "dropped",
                    "success_rate",
                    "min_success_rate",
                )
            },
            "chunks": len(wall),
            "chunk_ms": {
                "p50": round(float(np.median(wall)), 3),
                "p99": round(float(np.percentile(wall, 99)), 3),
            },
            "chunk_cpu_ms": {
                "p50": round(float(np.median(cpu)), 3),
                "p99": round(float(np.percentile(cpu, 99)), 3),
            },
        }
        print(json.dumps({path: out[path]}), flush=True)
    return {
        "episodes_per_instruction": episodes,
        "objects_per_episode": per_episode,
        "seed": seed,
        "models": out,
        "load": Path("/proc/loadavg").read_text().split()[:3],
    }


def finish(state: str, init: str, val: list[str], out: str) -> dict:
    """The policy of a models.train run stopped by SIGINT/SIGTERM (its training state, saved
    between two steps), saved as models.train saves a finished one; its token accuracy is
    measured on `val` (held-out collections) and its meta names the step it stopped at."""
    from safetensors import safe_open

    from models import checkpoint
    from models.data import load
    from models.train import evaluate_tokens

    ck = checkpoint.load(init)
    with safe_open(state, framework="pt") as f:
        info = json.loads(f.metadata()["meta"])
        weights = {k[6:]: f.get_tensor(k) for k in f.keys() if k.startswith("model.")}
    ck.model.load_state_dict(weights, strict=True)
    held = load(val)  # the same tokenizers as the training data, else load refuses
    run, acc = info["run"], evaluate_tokens(ck.model, held)
    meta = {
        "tokenizer_config": held.tokenizer_config,
        "obs_tokens_spec": held.obs_tokens_spec,
        "val_rows": len(held),
        "val_data": val,
        "held_out_instructions": [],
        "val_token_accuracy": {str(d): round(x, 4) for d, x in acc.items()},
        "train_seconds": info["seconds"],
        "steps": info["step"],
        "planned_steps": run["steps"],
        "batch": run["batch"],
        "lr": run["lr"],
        "seed": run["seed"],
        "data": run["data"],
        "init": init,
        "balanced_instructions": True,
        "params": ck.model.num_params(),
        "log": info["log"],
    }
    checkpoint.save(out, ck.model, held.vocab, meta)
    return {k: meta[k] for k in ("steps", "train_seconds", "val_token_accuracy")}


def card(model_dir: str, eval_json: str, max_committed: int, lineage: str | None) -> dict:
    """Write what the node and a reader need into the exported card: max_committed (the
    node's TokenPolicy reads it: the most committed waypoints it conditions on), how the
    prefix was trained, the lockstep success and chunk cost (eval's JSON) and the lineage."""
    path = Path(model_dir) / "card.json"
    c = json.loads(path.read_text())
    c["max_committed"] = max_committed
    c["rtc"] = {
        "method": "the committed waypoints forced as the chunk's first tokens "
        "(rtinfer.inference.decode, one verify pass)",
        "max_committed": max_committed,
        "training": "teacher forcing on the expert's 16-waypoint chunks, plus as many "
        "rows whose observation is d old (d = k periods, k uniform in 1..max_committed) "
        "and whose first k waypoints are what was executed meanwhile (token_long "
        "delayed)",
    }
    c["success"] = {"lockstep": json.loads(Path(eval_json).read_text())}
    if lineage:
        c["lineage"] = json.loads(Path(lineage).read_text())
    path.write_text(json.dumps(c, indent=1))
    return {"max_committed": max_committed, "card": str(path)}


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
    h = sub.add_parser("heldout", help="a few delayed rows of a held-out collection")
    h.add_argument("--data", required=True)
    h.add_argument("--out", required=True)
    h.add_argument("--rows", type=int, default=24)
    h.add_argument("--max-delay", type=int, default=6)
    h.add_argument("--seed", type=int, default=1)
    f = sub.add_parser("finish", help="save the policy of a training run stopped early")
    f.add_argument("--state", required=True)
    f.add_argument("--init", required=True)
    f.add_argument("--val", nargs="+", required=True)
    f.add_argument("--out", required=True)
    c = sub.add_parser("card", help="max_committed, success and lineage into card.json")
    c.add_argument("--dir", required=True)
    c.add_argument("--eval", required=True, help="token_long eval's JSON")
    c.add_argument("--max-committed", type=int, default=6)
    c.add_argument("--lineage", default=None, help="a JSON file of the commands and data")
    e = sub.add_parser("eval", help="lockstep success and chunk cost of models, same run")
    e.add_argument("--model", nargs="+", required=True)
    e.add_argument("--episodes", type=int, default=1, help="per instruction")
    e.add_argument("--per-episode", type=int, default=10, help="objects per episode")
    e.add_argument("--seed", type=int, default=7000)
    a = ap.parse_args(argv)
    if a.cmd == "warm":
        r = warm(a.checkpoint, a.out, a.max_ctx)
    elif a.cmd == "heldout":
        r = heldout(a.data, a.out, a.rows, a.max_delay, a.seed)
    elif a.cmd == "finish":
        r = finish(a.state, a.init, a.val, a.out)
    elif a.cmd == "card":
        r = card(a.dir, a.eval, a.max_committed, a.lineage)
    elif a.cmd == "eval":
        r = evaluate(a.model, episodes=a.episodes, per_episode=a.per_episode, seed=a.seed)
    else:
        r = delayed(a.data, a.out, a.max_delay, a.seed)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
