"""A LeRobot SmolVLA or Diffusion Policy checkpoint -> an rtinfer flow model directory,
checked against LeRobot's own chunk at every level.

`package(checkpoint, out, ...)` exports the policy's prefix and step graphs (smolvla.py,
diffusion.py), writes the directory through models.flow_package.package_flow (which loads it
as the node does and runs each level once), then runs rtinfer's FlowRunner and LeRobot's
preprocessor -> predict_action_chunk -> postprocessor on the same observations and the same
initial noise, at every level's step count (LeRobot's num_steps / num_inference_steps set
to it). Any level further than `atol` from LeRobot refuses the package (PackageError, one
line); otherwise the directory is written again with the parity in its card.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from examples.lerobot_flow import checkpoint as ckpt_mod
from models.chunk_package import PackageError

ATOL = 1e-4
PARITY_OBS = 3


def exporter(kind: str):
    from examples.lerobot_flow import diffusion, smolvla

    return {"smolvla": smolvla, "diffusion": diffusion}[kind]


def affine(ckpt, d_m: int) -> dict:
    """physical = x * scale + offset for the first D columns (LeRobot's unnormaliser is
    affine per dimension: read it off at 0 and 1); padded columns are identity."""
    import torch

    d = ckpt.policy.config.action_feature.shape[0]
    zero = ckpt.normalise("action", torch.zeros(d), inverse=True).numpy()
    one = ckpt.normalise("action", torch.ones(d), inverse=True).numpy()
    scale, offset = np.ones(d_m, np.float32), np.zeros(d_m, np.float32)
    scale[:d], offset[:d] = one - zero, zero
    return {"scale": scale, "offset": offset}


def action_spec(ckpt, path=None) -> dict:
    path = Path(path) if path else ckpt.path / "action_spec.json"
    if not path.is_file():
        raise PackageError(
            f"{ckpt.path}: no action spec; pass --action-spec FILE (names, "
            f"units, limits, horizon <= the policy's chunk, period_ns, start_ns: "
            f"docs/policies.md section 2)"
        )
    return json.loads(path.read_text())


def package(
    checkpoint,
    out,
    *,
    vlm=None,
    spec=None,
    levels=None,
    atol: float = ATOL,
    parity_obs: int = PARITY_OBS,
) -> dict:
    """Write the flow model directory `out`; returns its card."""
    from models.flow_package import package_flow

    ckpt = ckpt_mod.load(checkpoint, vlm=vlm)
    ex = exporter(ckpt.kind)
    spec = action_spec(ckpt, spec)
    with tempfile.TemporaryDirectory(prefix=".lerobot-flow-", dir=Path(out).parent) as tmp:
        g = ex.export(ckpt, Path(tmp) / "graphs")
        steps = levels or sorted({g["default_steps"], 4, 2, 1}, reverse=True)
        kw = dict(
            levels=[(k, 0) for k in steps],
            action_spec=spec,
            obs_spec=g["obs_spec"],
            integrator=g["integrator"],
            affine=affine(ckpt, g["noise_shape"][-1]),
            ddim=g.get("ddim"),
        )
        draft = Path(tmp) / "model"
        package_flow(draft, g["prefix"], g["steps"], **kw)
        report = parity(ckpt, draft, parity_obs)
        worst = max(r["max_abs_diff"] for r in report)
        if not worst <= atol:
            raise PackageError(
                f"{checkpoint}: the packaged chunk differs from LeRobot's by "
                f"{worst:.3g} > {atol:g} ({report}); report it with the versions"
            )
        card = package_flow(out, g["prefix"], g["steps"], **kw, card=_card(ckpt, report, steps))
    if ckpt.kind == "smolvla":
        ex.tokenizer(ckpt).save_pretrained(Path(out) / "tokenizer")
    return card


def _card(ckpt, report: list[dict], steps: list[int]) -> dict:
    from importlib.metadata import version

    cfg = ckpt.policy.config
    lineage = {
        "implementation": type(ckpt.policy).__module__ + "." + type(ckpt.policy).__name__,
        "lerobot": version("lerobot"),
        "torch": version("torch"),
        "checkpoint": str(ckpt.path),
        "params": int(sum(p.numel() for p in ckpt.policy.parameters())),
        "config": json.loads((ckpt.path / "config.json").read_text()),
        "parity": {
            "against": "preprocessor -> predict_action_chunk(noise) -> "
            "postprocessor, num steps = the level's",
            "observations": len(report) // len(steps),
            "levels": report,
        },
    }
    if ckpt.kind == "smolvla":
        lineage["task_tokens"] = {
            "tokenizer": "tokenizer/",
            "append": "\\n",
            "padding": "max_length",
            "length": cfg.tokenizer_max_length,
            "pad_id": exporter("smolvla").pad_id(ckpt),
        }
    return {
        "lineage": lineage,
        "levels": [
            {
                "level": i,
                "steps": k,
                "graph": 0,
                "parity_max_abs": max(r["max_abs_diff"] for r in report if r["steps"] == k),
            }
            for i, k in enumerate(steps)
        ],
    }


def parity(ckpt, model_dir, n_obs: int = PARITY_OBS, seed: int = 0) -> list[dict]:
    """Per level and observation: max |FlowRunner chunk - LeRobot chunk| (action units)."""
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.model.flow_model import FlowModelDir

    ex = exporter(ckpt.kind)
    model = FlowModelDir.load(model_dir)
    runner = FlowRunner(model, clip=False)
    h = model.action.horizon
    rng = np.random.default_rng(seed)
    out = []
    for n in range(n_obs):
        obs = ex.example_inputs(ckpt, seed=seed + n)
        noise = rng.standard_normal((1, runner.h_m, runner.d_m)).astype(np.float32)
        feeds = {k: v[None] for k, v in obs.items()}
        for lv in model.levels:
            ours = runner.run(feeds, lv["level"], noise=noise).copy()
            ref = ex.reference(ckpt, obs, noise, lv["steps"])[:h]
            out.append(
                {
                    "level": lv["level"],
                    "steps": lv["steps"],
                    "obs": n,
                    "max_abs_diff": float(np.abs(ours - ref).max()),
                }
            )
    return out
