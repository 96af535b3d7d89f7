"""Small LeRobot checkpoints built here, from local configurations and random weights (no
hub): what the tests, the docs example and the latency runs package.

- `vlm_dir(out, size)`: a SmolVLM (Idefics3-style) config.json with a tokenizer made here
  (a tokenizers WordLevel vocabulary over a few task words) and SmolVLM's image/video
  processors, saved as transformers saves them: what SmolVLA's `vlm_model_name` names.
  `size="tiny"` (text 64 wide, 4 layers; SigLIP-style vision 32 wide, 2 layers, 32x32 image)
  or `"smolvlm2-500m"` (the shapes of SmolVLM2-500M-Video-Instruct: text 960 wide, 32
  layers of which SmolVLA keeps 16, 15 heads / 5 KV heads; vision 768 wide, 12 layers, a
  512x512 image in 16x16 patches, pixel shuffle 4: 64 image tokens).
- `smolvla(out, ...)` / `diffusion(out, ...)`: a policy with random weights and dataset
  statistics, saved with its processor pipelines as LeRobot's training saves a checkpoint,
  plus the action_spec.json rtinfer needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = "pick place put sort the a to into on of red green blue cube bin left right".split()
SPECIAL = [
    "<pad>",
    "<unk>",
    "<|im_start|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<global-img>",
    "<image>",
    "<video>",
    "\n",
]
VLM_SIZES = {
    "tiny": dict(
        text=dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
        ),
        vision=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        scale_factor=2,
        layers=4,
    ),
    "smolvlm2-500m": dict(
        text=dict(
            hidden_size=960,
            intermediate_size=2560,
            num_hidden_layers=32,
            num_attention_heads=15,
            num_key_value_heads=5,
            head_dim=64,
        ),
        vision=dict(
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            image_size=512,
            patch_size=16,
        ),
        scale_factor=4,
        layers=16,
    ),
}


def vlm_dir(out, size: str = "tiny") -> Path:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
    )
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        extra_special_tokens={
            "fake_image_token": "<fake_token_around_image>",
            "global_image_token": "<global-img>",
            "image_token": "<image>",
            "end_of_utterance_token": "<end_of_utterance>",
        },
    )
    s = VLM_SIZES[size]
    # Keep the "\n" LeRobot appends to the task as a token of its own.
    fast.add_tokens(["\n"], special_tokens=True)
    SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(),
        tokenizer=fast,
        video_processor=SmolVLMVideoProcessor(),
        image_seq_len=4,
    ).save_pretrained(out)
    SmolVLMConfig(
        text_config=dict(
            model_type="llama",
            vocab_size=len(vocab),
            max_position_embeddings=8192,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            **s["text"],
        ),
        vision_config=s["vision"],
        scale_factor=s["scale_factor"],
        image_token_id=vocab["<image>"],
        pad_token_id=0,
    ).save_pretrained(out)
    return out


def _stats(rng, dim: int) -> dict:
    lo = rng.uniform(-1.0, 0.0, dim).astype(np.float32)
    hi = lo + rng.uniform(0.5, 2.0, dim).astype(np.float32)
    return {"mean": (lo + hi) / 2, "std": (hi - lo) / 4, "min": lo, "max": hi}


def _torch_stats(stats: dict) -> dict:
    import torch

    return {k: {s: torch.from_numpy(np.asarray(v)) for s, v in d.items()} for k, d in stats.items()}


def action_spec(dim: int, horizon: int, period_ns: int = 50_000_000) -> dict:
    return {
        "format": "rtinfer-action-spec",
        "version": 1,
        "names": [f"a{i}" for i in range(dim)],
        "units": ["1"] * dim,
        "low": [-3.0] * dim,
        "high": [3.0] * dim,
        "horizon": horizon,
        "period_ns": period_ns,
        "start_ns": 0,
    }


def smolvla(
    out,
    vlm: str | Path,
    *,
    state_dim: int = 6,
    action_dim: int = 4,
    chunk: int = 8,
    image_hw: int = 32,
    cameras=("top",),
    max_dim: int = 8,
    tokens: int = 8,
    seed: int = 0,
    layers: int | None = None,
    expert_layers: int = -1,
) -> Path:
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors

    from examples.lerobot_flow import checkpoint

    vlm_cfg = json.loads((Path(vlm) / "config.json").read_text())
    n_layers = layers or vlm_cfg["text_config"]["num_hidden_layers"]
    feats = {
        f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, image_hw, image_hw))
        for c in cameras
    }
    feats["observation.state"] = PolicyFeature(FeatureType.STATE, (state_dim,))
    action = PolicyFeature(FeatureType.ACTION, (action_dim,))
    cfg = SmolVLAConfig(
        vlm_model_name=str(vlm),
        load_vlm_weights=False,
        num_vlm_layers=min(n_layers, 16),
        num_expert_layers=expert_layers,
        input_features=feats,
        output_features={"action": action},
        chunk_size=chunk,
        n_action_steps=chunk,
        max_state_dim=max_dim,
        max_action_dim=max_dim,
        resize_imgs_with_padding=(image_hw, image_hw),
        tokenizer_max_length=tokens,
        pad_language_to="max_length",
        device="cpu",
        push_to_hub=False,
    )
    torch.manual_seed(seed)
    policy = SmolVLAPolicy(cfg).eval()
    rng = np.random.default_rng(seed)
    stats = _torch_stats(
        {"observation.state": _stats(rng, state_dim), "action": _stats(rng, action_dim)}
    )
    pre, post = make_smolvla_pre_post_processors(cfg, dataset_stats=stats)
    checkpoint.save(out, policy, pre, post)
    (Path(out) / "action_spec.json").write_text(json.dumps(action_spec(action_dim, chunk)))
    return Path(out)


def diffusion(
    out,
    *,
    state_dim: int = 10,
    env_dim: int = 6,
    action_dim: int = 4,
    horizon: int = 16,
    n_action_steps: int = 8,
    image_hw: int = 0,
    down_dims=(32, 64),
    train_steps: int = 100,
    inference_steps: int = 10,
    n_obs_steps: int = 1,
    seed: int = 0,
) -> Path:
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.diffusion.processor_diffusion import make_diffusion_pre_post_processors

    from examples.lerobot_flow import checkpoint

    feats = {"observation.state": PolicyFeature(FeatureType.STATE, (state_dim,))}
    if env_dim:
        feats["observation.environment_state"] = PolicyFeature(FeatureType.ENV, (env_dim,))
    if image_hw:
        feats["observation.images.top"] = PolicyFeature(FeatureType.VISUAL, (3, image_hw, image_hw))
    action = PolicyFeature(FeatureType.ACTION, (action_dim,))
    cfg = DiffusionConfig(
        input_features=feats,
        output_features={"action": action},
        n_obs_steps=n_obs_steps,
        horizon=horizon,
        n_action_steps=n_action_steps,
        down_dims=tuple(down_dims),
        diffusion_step_embed_dim=32,
        n_groups=8,
        noise_scheduler_type="DDIM",
        num_train_timesteps=train_steps,
        num_inference_steps=inference_steps,
        crop_shape=None,
        resize_shape=None,
        pretrained_backbone_weights=None,
        spatial_softmax_num_keypoints=8,
        use_group_norm=True,
        device="cpu",
        push_to_hub=False,
    )
    torch.manual_seed(seed)
    policy = DiffusionPolicy(cfg).eval()
    rng = np.random.default_rng(seed)
    raw = {"observation.state": _stats(rng, state_dim), "action": _stats(rng, action_dim)}
    if env_dim:
        raw["observation.environment_state"] = _stats(rng, env_dim)
    if image_hw:
        raw["observation.images.top"] = {
            "mean": np.full((3, 1, 1), 0.5, np.float32),
            "std": np.full((3, 1, 1), 0.25, np.float32),
            "min": np.zeros((3, 1, 1), np.float32),
            "max": np.ones((3, 1, 1), np.float32),
        }
    pre, post = make_diffusion_pre_post_processors(cfg, dataset_stats=_torch_stats(raw))
    checkpoint.save(out, policy, pre, post)
    (Path(out) / "action_spec.json").write_text(json.dumps(action_spec(action_dim, n_action_steps)))
    return Path(out)
