"""A LeRobot checkpoint directory, loaded with LeRobot's own classes: the policy
(`save_pretrained`: config.json, model.safetensors) and its processor pipelines
(policy_preprocessor.json / policy_postprocessor.json and their normaliser state), which
hold the dataset statistics LeRobot 0.4 keeps outside the model.

`load(dir)` returns a Checkpoint; `save(dir, policy, pre, post)` writes one as LeRobot's
training does. `vlm` replaces SmolVLA's `vlm_model_name` (a hub id in a real checkpoint;
here a local SmolVLM config + processor directory, since no hub is reachable).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class CheckpointError(ValueError):
    """A checkpoint directory this example cannot package; the message says why and the fix."""


@dataclass
class Checkpoint:
    policy: object  # SmolVLAPolicy | DiffusionPolicy, eval mode
    pre: object  # LeRobot's PolicyProcessorPipeline (obs -> model inputs)
    post: object  # LeRobot's PolicyProcessorPipeline (model actions -> physical)
    path: Path

    @property
    def kind(self) -> str:
        return self.policy.name

    def step(self, pipeline, cls):
        """The first step of `pipeline` that is a `cls` (e.g. NormalizerProcessorStep)."""
        for s in pipeline.steps:
            if isinstance(s, cls):
                return s
        raise CheckpointError(
            f"{self.path}: its processor has no {cls.__name__}; save the "
            f"checkpoint with LeRobot's make_pre_post_processors pipelines"
        )

    def normalise(self, key: str, x, feature_type=None, inverse: bool = False):
        """LeRobot's own (un)normalisation of one feature (torch, traceable into ONNX)."""
        from lerobot.processor import NormalizerProcessorStep, UnnormalizerProcessorStep

        step = (
            self.step(self.post, UnnormalizerProcessorStep)
            if inverse
            else self.step(self.pre, NormalizerProcessorStep)
        )
        ft = feature_type or step.features[key].type
        return step._apply_transform(x, key, ft, inverse=inverse)


POLICIES = {
    "smolvla": ("lerobot.policies.smolvla.modeling_smolvla", "SmolVLAPolicy"),
    "diffusion": ("lerobot.policies.diffusion.modeling_diffusion", "DiffusionPolicy"),
}


def load(path, vlm: str | Path | None = None) -> Checkpoint:
    import importlib

    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_pre_post_processors

    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(
            f"{path}: no config.json; give a directory written by the "
            f"policy's save_pretrained (config.json, model.safetensors)"
        )
    kind = json.loads(cfg_file.read_text()).get("type")
    if kind not in POLICIES:
        raise CheckpointError(
            f"{path}: policy type {kind!r}; this example packages "
            f"{' and '.join(POLICIES)} (use lerobot_act for ACT)"
        )
    if not (path / "policy_preprocessor.json").is_file():
        raise CheckpointError(
            f"{path}: no policy_preprocessor.json (the dataset statistics); "
            f"save the pipelines of make_pre_post_processors(cfg, "
            f"dataset_stats=...) into the checkpoint with save_pretrained"
        )
    mod, cls = POLICIES[kind]
    policy_cls = getattr(importlib.import_module(mod), cls)
    cfg = PreTrainedConfig.from_pretrained(path)
    over = {}
    if kind == "smolvla":
        if vlm is not None:
            cfg.vlm_model_name = str(vlm)
        if not Path(cfg.vlm_model_name).is_dir():
            raise CheckpointError(
                f"{path}: vlm_model_name {cfg.vlm_model_name!r} is not a "
                f"local directory; pass --vlm DIR (its SmolVLM config.json "
                f"and processor files)"
            )
        over = {"tokenizer_processor": {"tokenizer_name": cfg.vlm_model_name}}
    cfg.device = "cpu"
    policy = policy_cls.from_pretrained(path, config=cfg).eval()
    pre, post = make_pre_post_processors(
        cfg, pretrained_path=str(path), preprocessor_overrides=over
    )
    return Checkpoint(policy, pre, post, path)


def save(path, policy, pre, post) -> Path:
    """Write a checkpoint directory as LeRobot's training does."""
    path = Path(path)
    policy.save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path
