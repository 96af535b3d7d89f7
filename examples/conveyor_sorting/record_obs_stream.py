"""Record an observation *body* stream from the cell, for benchmarks that replay real obs.

    python -m examples.conveyor_sorting.record_obs_stream \
        --out models/zoo/conveyor-v1/obs_stream.npz --steps 300 --seed 400

The lockstep env (examples.conveyor_sorting.env) with the scripted expert driving, one row per
policy step (50 ms apart): the `obs` wire body that step's observation goes out as (observe.
obs_body). File layout (np.load needs no pickle): `values.<field>` (N, ...) per array of the
body's "values" (objects, gantry, held, instruction) and `ints.<field>` (N,) per int of its
"ints" (instruction_id), so a reader rebuilds row i's body without importing this package
(`rtinfer bench fleet` does). An episode that ends early is followed by the next seed's.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from .config import EnvConfig
from .env import ConveyorSortEnv
from .expert import ScriptedExpert
from .observe import obs_body


def record(steps: int, seed: int, instruction=(0, 1, 2)) -> dict[str, np.ndarray]:
    """`steps` consecutive obs bodies of the expert driving the cell, as stacked arrays."""
    env = ConveyorSortEnv(EnvConfig())
    expert = ScriptedExpert(env.cfg.cell, env.tokenizer_cfg)
    rows: dict[str, list] = {}
    episode = 0
    while len(rows.get("ints.instruction_id", [])) < steps:
        obs, _ = env.reset(seed=seed + episode, options={"instruction": list(instruction)})
        expert.reset()
        done = truncated = False
        while not (done or truncated) and len(rows.get("ints.instruction_id", [])) < steps:
            body = obs_body(obs)
            for kind in ("values", "ints"):
                for k, v in body[kind].items():
                    rows.setdefault(f"{kind}.{k}", []).append(np.copy(v))
            _, values = expert.act_tokens(obs)
            obs, _, done, truncated, _ = env.step(values)
        episode += 1
    return {k: np.asarray(v) for k, v in rows.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the .npz to write")
    ap.add_argument("--steps", type=int, default=300, help="policy steps (50 ms each)")
    ap.add_argument("--seed", type=int, default=400, help="the first episode's seed")
    ap.add_argument("--instruction", default="0,1,2", help="bin of each class, e.g. 2,0,1")
    a = ap.parse_args(argv)
    arrays = record(a.steps, a.seed, tuple(int(v) for v in a.instruction.split(",")))
    np.savez_compressed(a.out, **arrays)
    print(
        json.dumps(
            {
                "out": a.out,
                "steps": a.steps,
                "arrays": {k: list(v.shape) for k, v in arrays.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
