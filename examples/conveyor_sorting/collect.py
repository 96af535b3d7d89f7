"""Collect expert demonstrations: one row per env step, all fixed-shape arrays in an .npz.

    python -m examples.conveyor_sorting.collect --episodes 50 --out demos.npz --seed 0
    python -m examples.conveyor_sorting.collect --policy MODEL_DIR --beta 0.2 ...   # DAgger

With --policy (DAgger, Ross et al. 2011) the model drives the cell and the scripted expert,
fed the same observations, labels every state the model visits; --beta is the fraction of
steps that run the expert's chunk instead. The summary's counts (overall and per_instruction)
are then the driving policy's own sorting result (with --beta 0: a lockstep evaluation for free).

Arrays (N = env steps over all episodes; no object arrays, so np.load needs no pickle):
  obs_tokens int32 (N, L), instruction_tokens int32 (N, C), action_tokens int32 (N, H, D),
  action_values float32 (N, H, D) (token bin centres), objects float32 (N, K, 4),
  gantry float32 (N, 8), held float32 (N, 1), reward float32 (N,), episode int32 (N,),
  step int32 (N,),
  with --camera NAME frame_NAME uint8 (N, H, W, 3) (the camera's frame at each observation),
  and JSON strings (0-d unicode arrays): tokenizer_config, obs_tokenizer_config,
  obs_tokens_spec (for rtinfer.model.obs_tokens on the inference node), cell_config, summary.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.progress import Progress

from .config import EnvConfig
from .env import ConveyorSortEnv
from .evaluate import COUNTS, SUMMARY, instruction_key, parse_instructions
from .expert import ScriptedExpert
from .obs_tokens import ObsTokenizer, ObsTokenizerConfig


def collect(
    episodes: int,
    out: str | Path,
    *,
    seed: int = 0,
    cfg: EnvConfig | None = None,
    show_progress: bool = True,
    noise_m: float = 0.0,
    noise_prob: float = 1.0,
    make_policy=None,
    beta: float = 0.0,
    instructions: list[list[int]] | None = None,
) -> dict:
    """Run the expert for `episodes` episodes and write the dataset to `out`; returns a summary.

    noise_m > 0 (DART-style): the env executes the expert's chunk with Gaussian noise of
    this standard deviation (m) on x, y, z, while the dataset keeps the clean expert labels,
    so the policy also sees states just off the expert's path and how to return from them.
    noise_prob: the fraction of env steps that get noise (the rest run clean, so picks that
    need millimetre alignment still happen).
    make_policy: make_policy(env) -> an env policy (reset() / act(obs)) that drives the env
    instead of the expert, which still labels every row (DAgger); beta: the fraction of steps
    that execute the expert's chunk anyway. instructions: episode i uses
    instructions[i % len] (else a seeded draw)."""
    cfg = cfg or EnvConfig()
    rng = np.random.default_rng(seed)
    env = ConveyorSortEnv(cfg)
    expert = ScriptedExpert(cfg.cell, env.tokenizer_cfg)
    policy = make_policy(env) if make_policy is not None else None
    otok = ObsTokenizer(ObsTokenizerConfig.for_cell(cfg.cell, bins=cfg.token_bins))
    rows: dict[str, list] = {
        k: []
        for k in (
            "obs_tokens",
            "instruction_tokens",
            "action_tokens",
            "action_values",
            "objects",
            "gantry",
            "held",
            "reward",
            "episode",
            "step",
        )
    }
    totals = dict.fromkeys(COUNTS, 0)
    per_instruction: dict[str, dict] = {}
    with Progress(disable=not show_progress) as bar:
        task = bar.add_task("collecting", total=episodes)
        for ep in range(episodes):
            opts = {"instruction": instructions[ep % len(instructions)]} if instructions else None
            obs, _ = env.reset(seed=seed * 1_000_003 + ep, options=opts)
            counts = per_instruction.setdefault(
                instruction_key(obs["instruction"]), dict.fromkeys(COUNTS, 0)
            )
            expert.reset()
            if policy is not None:
                policy.reset()
            done = truncated = False
            k = 0
            while not (done or truncated):
                tokens, values = expert.act_tokens(obs)
                for name, v in (
                    ("obs_tokens", otok.encode(obs)),
                    ("instruction_tokens", otok.instruction_tokens(obs["instruction"])),
                    ("action_tokens", tokens),
                    ("action_values", values),
                    ("objects", obs["objects"]),
                    ("gantry", obs["gantry"]),
                    ("held", obs["held"]),
                ):
                    rows[name].append(v)
                for name, (image, _) in obs.get("frames", {}).items():
                    rows.setdefault(f"frame_{name}", []).append(image)
                executed = values
                if policy is not None and rng.random() >= beta:
                    executed = policy.act(obs)
                elif noise_m > 0 and rng.random() < noise_prob:
                    executed = values.copy()
                    executed[:, :3] += rng.normal(0.0, noise_m, (len(values), 3)).astype(np.float32)
                obs, reward, done, truncated, info = env.step(executed)
                rows["reward"].append(reward)
                rows["episode"].append(ep)
                rows["step"].append(k)
                k += 1
            for c in COUNTS:
                totals[c] += info[c]
                counts[c] += info[c]
            bar.update(task, advance=1, description=f"collecting ({totals['correct']} sorted)")
    resolved = totals["correct"] + totals["wrong"] + totals["missed"] + totals["dropped"]
    summary = {
        "episodes": episodes,
        "seed": seed,
        "noise_m": noise_m,
        "noise_prob": noise_prob,
        "dagger": policy is not None,
        "beta": beta,
        "steps": len(rows["step"]),
        **totals,
        "success_rate": totals["correct"] / resolved if resolved else 1.0,
        "per_instruction": {
            k: {c: v[c] for c in SUMMARY[:-1]} | {"success_rate": _rate(v)}
            for k, v in sorted(per_instruction.items())
        },
    }
    dtypes = {"reward": np.float32, "episode": np.int32, "step": np.int32}
    arrays = {k: np.asarray(v, dtype=dtypes.get(k)) for k, v in rows.items()}
    np.savez_compressed(
        out,
        **arrays,
        tokenizer_config=np.array(json.dumps(env.tokenizer_cfg.to_dict())),
        obs_tokenizer_config=np.array(json.dumps(otok.cfg.to_dict())),
        obs_tokens_spec=np.array(json.dumps(otok.cfg.spec())),
        cell_config=np.array(cfg.cell.to_json()),
        summary=np.array(json.dumps(summary)),
    )
    return summary


def _rate(counts: dict) -> float:
    resolved = sum(counts[c] for c in ("correct", "wrong", "missed", "dropped"))
    return counts["correct"] / resolved if resolved else 1.0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Collect scripted-expert demonstrations (.npz).")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--objects-per-episode", type=int, default=EnvConfig.episode_objects)
    ap.add_argument("--latency-ms", type=int, default=0)
    ap.add_argument("--noise-m", type=float, default=0.0, help="DART noise on executed xyz (m)")
    ap.add_argument("--noise-prob", type=float, default=1.0, help="fraction of steps with noise")
    ap.add_argument("--camera", default=None, help="also store this camera's frames (overhead)")
    ap.add_argument(
        "--frame-size",
        type=int,
        nargs=2,
        default=EnvConfig.frame_hw,
        metavar=("H", "W"),
        help="the camera's frame height and width (px)",
    )
    ap.add_argument("--policy", default=None, help="model directory that drives the cell (DAgger)")
    ap.add_argument("--beta", type=float, default=0.0, help="with --policy: expert step fraction")
    ap.add_argument(
        "--instruction",
        action="append",
        default=[],
        help="class->bin permutation, e.g. 0,1,2, or 'all' for the six "
        "(repeatable; episodes cycle through)",
    )
    a = ap.parse_args(argv)
    cfg = replace(
        EnvConfig(),
        episode_objects=a.objects_per_episode,
        latency_ms=a.latency_ms,
        camera=a.camera,
        frame_hw=tuple(a.frame_size),
    )
    make_policy = None
    if a.policy:
        from .policy_adapter import model_factory

        make_policy = model_factory(a.policy)
    try:
        instructions = parse_instructions(a.instruction) if a.instruction else None
    except ValueError as e:
        raise SystemExit(f"collect: --instruction: {e}") from None
    print(
        json.dumps(
            collect(
                a.episodes,
                a.out,
                seed=a.seed,
                cfg=cfg,
                noise_m=a.noise_m,
                noise_prob=a.noise_prob,
                make_policy=make_policy,
                beta=a.beta,
                instructions=instructions,
            )
        )
    )


if __name__ == "__main__":
    main()
