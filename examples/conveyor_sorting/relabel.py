"""Counterfactual relabelling of carry states: the same observation under other instructions,
labelled by the scripted expert.

Behaviour cloning alone lets a policy read the target bin off the gantry's own velocity
once a carry is under way (the expert is already moving there), so the instruction only
matters in the few states where a carry starts, and the policy learns a prior instead of
the instruction (the copycat problem). Relabelling every carry state under every other
training instruction, with the expert's action for that instruction, makes the instruction
the only way to predict the bin. States stay real (collected); only labels are recomputed.

    python -m examples.conveyor_sorting.relabel demos.npz dart.npz --out relabel.npz
    python -m examples.conveyor_sorting.relabel ... --exclude 2,0,1   # hold an instruction out
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
from rich.progress import track

from rtinfer.model.action_tokens import TokenizerConfig

from .config import CellConfig
from .expert import ScriptedExpert


def carry_counterfactuals(
    data: dict[str, np.ndarray],
    instructions: np.ndarray,
    perms,
    per_state: int,
    rng: np.random.Generator,
):
    """(row, instruction, observation) for every carry state (held >= 0) of `data` (arrays
    objects, gantry, held) under each instruction of `perms` other than its own
    (`instructions[row]`), or per_state of them drawn from `rng`: the states to relabel."""
    for i in np.flatnonzero(data["held"][:, 0] >= 0):
        others = [p for p in perms if p != list(instructions[i])]
        if per_state:
            others = [others[j] for j in rng.choice(len(others), per_state, replace=False)]
        for perm in others:
            yield (
                i,
                perm,
                {
                    "objects": data["objects"][i],
                    "gantry": data["gantry"][i],
                    "held": data["held"][i],
                    "instruction": np.int32(perm),
                },
            )


def relabel(
    paths: list[str], out: str, exclude: list[list[int]], per_state: int = 0, seed: int = 0
) -> dict:
    """per_state > 0: only that many other instructions per carry state (drawn at random), so
    relabelled rows do not crowd out the picking states in training."""
    rng = np.random.default_rng(seed)
    parts = []
    for p in paths:  # read every array once (NpzFile decompresses on each access)
        with np.load(p, allow_pickle=False) as z:
            parts.append({k: z[k] for k in z.files})
    z0 = parts[0]
    cell = CellConfig(
        **{k: v for k, v in json.loads(str(z0["cell_config"])).items() if k in ("belt_speed",)}
    )
    tok = TokenizerConfig.from_dict(json.loads(str(z0["tokenizer_config"])))
    expert = ScriptedExpert(cell, tok)
    perms = [
        list(p) for p in itertools.permutations(range(cell.num_classes)) if list(p) not in exclude
    ]
    rows = {k: [] for k in ("obs_tokens", "instruction_tokens", "action_tokens")}
    for z in parts:
        n = int(np.count_nonzero(z["held"][:, 0] >= 0))
        for i, perm, obs in track(
            carry_counterfactuals(z, z["instruction_tokens"], perms, per_state, rng),
            description=f"relabel {n} carry states",
        ):
            expert.reset()  # a carry is decided from the observation alone
            tokens, _ = expert.act_tokens(obs)
            rows["obs_tokens"].append(z["obs_tokens"][i])
            rows["instruction_tokens"].append(np.int32(perm))
            rows["action_tokens"].append(tokens)
    arrays = {k: np.asarray(v, np.int32) for k, v in rows.items()}
    np.savez_compressed(
        out,
        **arrays,
        tokenizer_config=z0["tokenizer_config"],
        obs_tokens_spec=z0["obs_tokens_spec"],
        cell_config=z0["cell_config"],
        summary=np.array(json.dumps({"relabelled_from": paths, "rows": len(arrays["obs_tokens"])})),
    )
    return {"rows": len(arrays["obs_tokens"]), "instructions": perms}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--per-state", type=int, default=0, help="other instructions per state (0: all)"
    )
    ap.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="held-out instruction, e.g. 2,0,1 (repeatable)",
    )
    a = ap.parse_args(argv)
    print(
        json.dumps(
            relabel(
                a.data,
                a.out,
                [[int(x) for x in e.split(",")] for e in a.exclude],
                per_state=a.per_state,
            )
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
