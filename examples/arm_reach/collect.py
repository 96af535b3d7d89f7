"""Collect expert demonstrations for behaviour cloning: closed-loop lockstep rollouts of the
scripted expert through the real ControlStack, one row per policy period, into an .npz.

    python -m examples.arm_reach.collect --episodes 60 --targets 25 --out runs/arm/demos.npz

Each episode starts from the ready pose plus noise and gets its own target seed. DART-style
noise (Laskey et al. 2017): on a fraction `noise_prob` of the policy periods the arm
executes the expert's chunk offset by a Gaussian joint offset (`noise_rad`, one draw per
chunk; only while the hand is over NOISE_FAR_M from the target), while the row keeps the
clean expert label, so the dataset also covers states just off the expert's path and how to
return from them.

Arrays (N rows): joints float32 (N, 2n), ee float32 (N, 3), target float32 (N, 3),
chunk float32 (N, H, n) (the expert's label), episode int32 (N,); summary: a JSON string.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from .expert import ReachExpert
from .lockstep import action_spec, load_robot, run
from .sim import ArmSim, ready_pose

KEYS = ("joints", "ee", "target", "chunk", "episode")
NOISE_FAR_M = 0.06  # noise only on the way (a perturbed dwell would never complete)


def collect(
    episodes: int,
    targets: int,
    out,
    *,
    seed: int = 0,
    noise_rad: float = 0.08,
    noise_prob: float = 0.5,
    start_noise_rad: float = 0.4,
    latency_ms: int = 5,
) -> dict:
    """Write the dataset to `out`; returns its summary (rows, the expert's success, time)."""
    _, control, hardware = load_robot()
    spec = action_spec(control)
    expert = ReachExpert(control, spec)
    rng = np.random.default_rng(seed)
    lo, hi = zip(*(a.workspace for a in control.axes))
    rows = {k: [] for k in KEYS}
    reached = resolved = 0
    wall0 = time.perf_counter()
    for ep in range(episodes):
        sim = ArmSim(control, **{**hardware, "seed": seed * 10_007 + ep, "seconds": None})
        q0 = np.clip(ready_pose(control) + rng.normal(0, start_noise_rad, control.n), lo, hi)
        sim.reset(q0=q0)
        expert.reset()

        def record(obs, chunk, ep=ep):
            for k in ("joints", "ee", "target"):
                rows[k].append(obs[k])
            rows["chunk"].append(chunk)
            rows["episode"].append(ep)
            far = np.linalg.norm(obs["ee"] - obs["target"]) > NOISE_FAR_M
            if far and rng.random() < noise_prob:
                return chunk + rng.normal(0, noise_rad, control.n).astype(np.float32)
            return None

        r = run(sim, expert.act, targets=targets, latency_ms=latency_ms, on_chunk=record)
        reached, resolved = reached + r["reached"], resolved + r["targets"]
    arrays = {k: np.asarray(v, np.int32 if k == "episode" else np.float32) for k, v in rows.items()}
    summary = {
        "rows": len(arrays["chunk"]),
        "episodes": episodes,
        "targets": resolved,
        "expert_success": reached / max(resolved, 1),
        "noise_rad": noise_rad,
        "noise_prob": noise_prob,
        "seed": seed,
        "wall_s": time.perf_counter() - wall0,
        "action_spec": spec.hash,
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays, summary=np.array(json.dumps(summary)))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--targets", type=int, default=25, help="targets per episode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise-rad", type=float, default=0.08)
    ap.add_argument("--noise-prob", type=float, default=0.5)
    ap.add_argument("--out", default="runs/arm_reach/demos.npz")
    a = ap.parse_args(argv)
    print(
        json.dumps(
            collect(
                a.episodes,
                a.targets,
                a.out,
                seed=a.seed,
                noise_rad=a.noise_rad,
                noise_prob=a.noise_prob,
            )
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
