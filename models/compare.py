"""A model directory against a reference one (the shipped policy) on the reference's recorded
stream: greedy token agreement, the acceptance a drafter would get, and decode-step time.

    python -m models.compare models/zoo/conveyor-v1-draft --reference models/zoo/conveyor-v1

Both run in ONNX Runtime on one thread at full depth, fp32. Written into the model's
card.json under "reference" (and printed):
- token_agreement, chunk_agreement, first_token_agreement: each model decodes its own
  greedy chunk from every recorded prefix; the fraction of tokens / whole chunks / first
  tokens that are equal (a token after the first difference follows a different prefix).
- acceptance: teacher forced on the reference's greedy chunks, the fraction of positions
  where the model's greedy token equals the reference's (what a greedy drafter proposing
  for that reference gets accepted, token by token); acceptance_by_position per chunk index.
- step_us: k=1 decode-step p50/p99 of both, `rounds` interleaved runs of `steps` steps each
  (rtinfer.bench.backend), and their ratio (medians over the rounds).
The card's "training" also gets the checkpoint's facts that rtinfer export leaves out
(EXTRA_FACTS: the distillation teacher, the learning rate, the start it was grown from).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from rtinfer.bench.backend import run as bench_steps
from rtinfer.inference.backends import get_backend
from rtinfer.model.directory import ModelDir

from . import checkpoint
from .quantise import STREAM, greedy_chunks, recorded_prefixes

EXTRA_FACTS = (
    "lr",
    "teacher",
    "distill",
    "distill_weight",
    "val_teacher_agreement",
    "grown_from",
    "balanced_instructions",
)


@torch.no_grad()
def acceptance(model_dir, prefixes, ref_chunks: np.ndarray) -> np.ndarray:
    """(cycles, chunk tokens) bool: the model's greedy token, given the prefix and the
    reference's chunk so far, equals the reference's token (torch, the directory's weights)."""
    md = ModelDir.load(model_dir)
    policy = checkpoint.load(Path(model_dir) / "policy").model
    a0, a1, n = md.vocab.action_start, md.vocab.action_stop, ref_chunks.shape[1]
    seqs = torch.from_numpy(
        np.stack([np.concatenate([p, c[:-1] + a0]) for p, c in zip(prefixes, ref_chunks)])
    )
    at = torch.arange(len(prefixes[0]) - 1, len(prefixes[0]) - 1 + n)
    got = policy(seqs)[:, at, a0:a1].argmax(-1).numpy()
    return got == ref_chunks


def compare(model_dir, reference, *, steps: int = 200, rounds: int = 5, card: bool = True) -> dict:
    """The figures above; blocks for seconds to a minute (the step timings dominate)."""
    md, ref_md = ModelDir.load(model_dir), ModelDir.load(reference)
    stream = ref_md.path / STREAM
    prefixes = recorded_prefixes(ref_md, stream)
    if md.vocab != ref_md.vocab:
        raise ValueError(f"{model_dir} and {reference} have different vocabularies")
    onnx = get_backend("onnx")
    ref = greedy_chunks(onnx.load(ref_md, precision="fp32"), prefixes)
    got = greedy_chunks(onnx.load(md, precision="fp32"), prefixes)
    accept = acceptance(model_dir, prefixes, ref)
    timings = [
        bench_steps(
            {"reference": reference, "model": model_dir}, backends=("onnx",), steps=steps, threads=1
        )["sizes"]
        for _ in range(rounds)
    ]
    step = {
        name: {
            q: float(np.median([t[name]["backends"]["onnx"]["decode"][q] for t in timings]))
            for q in ("p50_us", "p99_us")
        }
        for name in ("reference", "model")
    }
    out = {
        "reference": Path(reference).name,
        "stream": stream.name,
        "cycles": len(prefixes),
        "tokens": int(got.size),
        "token_agreement": float((got == ref).mean()),
        "chunk_agreement": float((got == ref).all(axis=1).mean()),
        "first_token_agreement": float((got[:, 0] == ref[:, 0]).mean()),
        "acceptance": float(accept.mean()),
        "acceptance_by_position": [round(float(x), 4) for x in accept.mean(axis=0)],
        "step_us": {
            **step,
            "ratio_p50": step["model"]["p50_us"] / step["reference"]["p50_us"],
            "rounds": rounds,
            "steps_per_round": steps,
            "backend": "onnx fp32, 1 thread, k=1 at full depth",
            "load_avg_1m": round(os.getloadavg()[0], 2),
        },
    }
    if card:
        path = Path(model_dir) / "card.json"
        c = json.loads(path.read_text())
        c["reference"] = out
        meta = json.loads((Path(model_dir) / "policy.json").read_text())["meta"]
        c.setdefault("training", {}).update({k: meta[k] for k in EXTRA_FACTS if k in meta})
        path.write_text(json.dumps(c, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="model directory (rtinfer export output)")
    ap.add_argument("--reference", default="models/zoo/conveyor-v1", help="the one to match")
    ap.add_argument("--steps", type=int, default=200, help="decode steps timed per round")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--no-card", action="store_true", help="leave card.json as it is")
    a = ap.parse_args(argv)
    print(
        json.dumps(
            compare(a.model, a.reference, steps=a.steps, rounds=a.rounds, card=not a.no_card),
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
