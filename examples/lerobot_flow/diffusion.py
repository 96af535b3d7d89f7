"""Diffusion Policy (lerobot.policies.diffusion) as an rtinfer flow policy with the DDIM
integrator: two ONNX graphs that call LeRobot's own modules.

prefix.onnx (once per cycle): `state` float32 [1, S] (and `environment_state` [1, E], and
  each camera's uint8 frame [1, H, W, 3], scaled to [0, 1] and channels first), normalised
  in the graph with the checkpoint's statistics -> `_prepare_global_conditioning` (the
  ResNet encoder for frames) -> `global_cond` float32 [1, G].
step.onnx (K times): `global_cond` + `x_t` float32 [1, horizon, D] + `t` int64 [1] (the
  diffusion timestep) -> the conditional 1-D UNet -> `v`: epsilon (or the sample, as the
  config's prediction_type says). rtinfer runs diffusers' DDIM update (eta 0, "leading"
  spacing, the checkpoint's alphas_cumprod and clip_sample_range), as LeRobot does with
  noise_scheduler_type "DDIM"; levels are DDIM step counts.
Only n_obs_steps = 1 is packaged: the node answers each observation on its own, and the
served chunk starts at the first predicted action (LeRobot's start index n_obs_steps - 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPSET = 17


class DiffusionPackageError(ValueError):
    """A Diffusion Policy checkpoint this example cannot serve; the message says the fix."""


def camera_name(feature_key: str) -> str:
    return feature_key.rsplit(".", 1)[-1]


def check(ckpt) -> None:
    cfg = ckpt.policy.config
    if cfg.n_obs_steps != 1:
        raise DiffusionPackageError(
            f"{ckpt.path}: n_obs_steps {cfg.n_obs_steps}; the node answers one observation at "
            f"a time: train with n_obs_steps=1 (or stack the history into one state input)"
        )


def obs_spec(ckpt) -> dict:
    cfg = ckpt.policy.config
    inputs = [{"key": "state", "dtype": "float32", "shape": [cfg.robot_state_feature.shape[0]]}]
    if cfg.env_state_feature:
        inputs.append(
            {
                "key": "environment_state",
                "dtype": "float32",
                "shape": [cfg.env_state_feature.shape[0]],
            }
        )
    for key, ft in cfg.image_features.items():
        c, h, w = ft.shape
        inputs.append(
            {
                "key": camera_name(key),
                "kind": "image",
                "dtype": "uint8",
                "shape": [h, w, c],
                "camera": camera_name(key),
            }
        )
    return {
        "format": "rtinfer-obs-spec",
        "version": 1,
        "normalisation": "in the graph",
        "inputs": inputs,
    }


def _batch(ckpt, obs: dict, normalise) -> dict:
    """LeRobot's model batch ([B, n_obs_steps=1, ...]) from the torch inputs by obs key."""
    import torch
    from lerobot.utils.constants import OBS_ENV_STATE, OBS_IMAGES, OBS_STATE

    cfg = ckpt.policy.config
    batch = {OBS_STATE: normalise(OBS_STATE, obs["state"])[:, None]}
    if cfg.env_state_feature:
        batch[OBS_ENV_STATE] = normalise(OBS_ENV_STATE, obs["environment_state"])[:, None]
    if cfg.image_features:
        frames = [
            normalise(k, obs[camera_name(k)].permute(0, 3, 1, 2).float() / 255.0)
            for k in cfg.image_features
        ]
        batch[OBS_IMAGES] = torch.stack(frames, dim=1)[:, None]
    return batch


def modules(ckpt):
    import torch

    model = ckpt.policy.diffusion
    keys = [e["key"] for e in obs_spec(ckpt)["inputs"]]

    class Prefix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return model._prepare_global_conditioning(
                _batch(ckpt, dict(zip(keys, inputs)), ckpt.normalise)
            )

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, global_cond, x_t, t):
            return model.unet(x_t, t, global_cond=global_cond)

    return Prefix().eval(), Step().eval()


def example_inputs(ckpt, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for e in obs_spec(ckpt)["inputs"]:
        feeds[e["key"]] = (
            rng.integers(0, 256, e["shape"], dtype=np.uint8)
            if e.get("kind") == "image"
            else rng.normal(0, 1, e["shape"]).astype(np.float32)
        )
    return feeds


def ddim(ckpt) -> dict:
    """The manifest's "ddim" entry: LeRobot's own scheduler's schedule and settings."""
    cfg, sched = ckpt.policy.config, ckpt.policy.diffusion.noise_scheduler
    if cfg.noise_scheduler_type != "DDIM":
        raise DiffusionPackageError(
            f"{ckpt.path}: noise_scheduler_type {cfg.noise_scheduler_type!r}; rtinfer integrates "
            f"with DDIM: set noise_scheduler_type='DDIM' in the checkpoint's config.json (the "
            f"same trained UNet; DDPM's 100 stochastic steps are not a budget ladder)"
        )
    return {
        "alphas_cumprod": sched.alphas_cumprod.numpy().astype(np.float32).tolist(),
        "prediction": cfg.prediction_type,
        "clip_sample": float(cfg.clip_sample_range) if cfg.clip_sample else None,
        "set_alpha_to_one": bool(sched.config.set_alpha_to_one),
        "steps_offset": int(sched.config.steps_offset),
    }


def export(ckpt, out_dir) -> dict:
    import torch

    check(ckpt)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix, step = modules(ckpt)
    spec = obs_spec(ckpt)
    keys = [e["key"] for e in spec["inputs"]]
    obs = example_inputs(ckpt)
    args = tuple(torch.from_numpy(obs[k])[None] for k in keys)
    cfg = ckpt.policy.config
    with torch.no_grad():
        cond = prefix(*args)
        torch.onnx.export(
            prefix,
            args,
            str(out_dir / "prefix.onnx"),
            input_names=keys,
            output_names=["global_cond"],
            opset_version=OPSET,
            dynamo=False,
        )
        x_t = torch.zeros(1, cfg.horizon, cfg.action_feature.shape[0])
        t = torch.zeros(1, dtype=torch.long)
        torch.onnx.export(
            step,
            (cond, x_t, t),
            str(out_dir / "step.onnx"),
            input_names=["global_cond", "x_t", "t"],
            output_names=["v"],
            opset_version=OPSET,
            dynamo=False,
        )
    return {
        "prefix": out_dir / "prefix.onnx",
        "steps": [out_dir / "step.onnx"],
        "obs_spec": spec,
        "integrator": "ddim",
        "ddim": ddim(ckpt),
        "noise_shape": (1, cfg.horizon, cfg.action_feature.shape[0]),
        "action_dim": cfg.action_feature.shape[0],
        "default_steps": ckpt.policy.diffusion.num_inference_steps,
    }


def reference(ckpt, obs: dict[str, np.ndarray], noise: np.ndarray, steps: int):
    """LeRobot's own chunk: preprocessor -> select_action's queue fill ->
    predict_action_chunk(noise) -> postprocessor, with num_inference_steps = `steps`;
    [n_action_steps, D] float32 physical."""
    import torch
    from lerobot.policies.utils import populate_queues
    from lerobot.utils.constants import ACTION, OBS_ENV_STATE, OBS_IMAGES, OBS_STATE

    policy, cfg = ckpt.policy, ckpt.policy.config
    raw = {OBS_STATE: torch.from_numpy(obs["state"])}
    if cfg.env_state_feature:
        raw[OBS_ENV_STATE] = torch.from_numpy(obs["environment_state"])
    for key in cfg.image_features:
        raw[key] = torch.from_numpy(obs[camera_name(key)]).permute(2, 0, 1).float() / 255.0
    batch = dict(ckpt.pre(raw))
    if cfg.image_features:
        batch[OBS_IMAGES] = torch.stack([batch[k] for k in cfg.image_features], dim=-4)
    saved = policy.diffusion.num_inference_steps
    policy.diffusion.num_inference_steps = steps
    try:
        policy.reset()
        policy._queues = populate_queues(policy._queues, batch)
        batch = {k: v for k, v in batch.items() if k != ACTION}
        a = policy.predict_action_chunk(batch, noise=torch.from_numpy(noise))
    finally:
        policy.diffusion.num_inference_steps = saved
    return ckpt.post(a)[0].numpy()
