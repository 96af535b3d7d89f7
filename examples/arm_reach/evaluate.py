"""Lockstep evaluation of the reach arm: the expert or a packaged model directory (run on
ONNX Runtime exactly as the inference node runs it: GraphRunner on the obs body's
feeds) drives the sim through the ControlStack for a number of targets.

    python -m examples.arm_reach.evaluate --policy models/zoo/arm-reach-bc --targets 100
    python -m examples.arm_reach.evaluate --policy expert --targets 100

Prints JSON: targets, reached, missed, success rate, time to reach (s), the controller's
clamp counters and the sim speed. Seeds from 1000 on are never used for training data.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from rtinfer.inference.graph_runner import GraphRunner
from rtinfer.model.chunk_model import ChunkModelDir
from rtinfer.model.directory import ModelError

from .expert import ReachExpert
from .lockstep import action_spec, load_robot, run
from .observe import obs_body
from .sim import ArmSim

EVAL_SEED = 1000


def onnx_policy(model_dir):
    """obs -> chunk through the model directory's level-0 graph on ONNX Runtime."""
    md = ChunkModelDir.load(model_dir)
    runner = GraphRunner(md, threads=1)
    return lambda obs: runner.run(md.obs.feeds(obs_body(obs))).copy()


def evaluate(
    policy: str, *, targets: int, episodes: int = 1, seed: int = EVAL_SEED, latency_ms: int = 5
) -> dict:
    """`episodes` runs of `targets` targets each (seeds seed, seed + 1, ...), summed."""
    _, control, hardware = load_robot()
    act = (
        ReachExpert(control, action_spec(control)).act
        if policy == "expert"
        else onnx_policy(policy)
    )
    total = {"targets": 0, "reached": 0, "missed": 0}
    reach, speed = [], []
    for ep in range(episodes):
        sim = ArmSim(control, **{**hardware, "seed": seed + ep, "seconds": None})
        r = run(sim, act, targets=targets, latency_ms=latency_ms)
        for k in total:
            total[k] += r[k]
        reach += sim.task.reach_s
        speed.append(r["speed_x"])
    rs = np.asarray(reach)
    return {
        **total,
        "success_rate": total["reached"] / max(total["targets"], 1),
        "reach_s": {
            "mean": float(rs.mean()),
            "p50": float(np.median(rs)),
            "p90": float(np.percentile(rs, 90)),
        }
        if rs.size
        else {},
        "policy": policy,
        "seed": seed,
        "episodes": episodes,
        "latency_ms": latency_ms,
        "speed_x": float(np.mean(speed)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--policy", default="models/zoo/arm-reach-bc", help='a model directory, or "expert"'
    )
    ap.add_argument("--targets", type=int, default=50, help="targets per episode")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--seed", type=int, default=EVAL_SEED)
    ap.add_argument("--latency-ms", type=int, default=5)
    a = ap.parse_args(argv)
    try:
        print(
            json.dumps(
                evaluate(
                    a.policy,
                    targets=a.targets,
                    episodes=a.episodes,
                    seed=a.seed,
                    latency_ms=a.latency_ms,
                )
            ),
            flush=True,
        )
    except ModelError as e:
        ap.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
