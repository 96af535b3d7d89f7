"""SmolVLA (lerobot.policies.smolvla) as an rtinfer flow policy: two ONNX graphs that call
LeRobot's own modules, so the served chunk is LeRobot's `sample_actions`.

prefix.onnx (once per cycle): each camera's uint8 frame [1, H, W, 3] (scaled to [0, 1],
  channels first, then LeRobot's `prepare_images`: resize with padding, [-1, 1]), `state`
  float32 [1, S] (normalised in the graph with the checkpoint's statistics) and
  `task_tokens` int32 [1, L] (the task tokenised by the checkpoint's tokenizer, "\n"
  appended, padded to `tokenizer_max_length` with its pad id; the mask is tokens != pad)
  -> `embed_prefix` -> the VLM forward that fills the KV cache. Outputs: `prefix_mask`
  bool [1, P] and `k{i}`, `v{i}` float32 [1, P, kv_heads, head_dim] for each VLM layer i.
step.onnx (K times): those outputs + `x_t` float32 [1, chunk_size, max_action_dim] +
  `t` float32 [1] -> LeRobot's `denoise_step` -> `v` (the flow velocity). rtinfer
  integrates it as LeRobot does: t from 1 (noise) to 0, dt = -1/K, x += dt * v.
The action affine un-normalises x[:, :D] with the checkpoint's statistics (D = the action
feature's size; the padded columns are not served).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

TOKENS = "task_tokens"
TASK = "pick the red cube"  # the example observations' task
OPSET = 17


class SmolVLAPackageError(ValueError):
    """A SmolVLA checkpoint this example cannot serve; the message says the fix."""


def check(ckpt) -> None:
    """Refuse the settings whose LeRobot code path the graphs do not follow."""
    cfg = ckpt.policy.config
    for bad, what in (
        (
            not cfg.use_cache,
            "use_cache is false; the step graph reads the prefix's KV "
            'cache: set "use_cache": true in config.json (same weights)',
        ),
        (
            cfg.empty_cameras,
            f"empty_cameras {cfg.empty_cameras} is not packaged; send those "
            f"views as real cameras, or set it to 0",
        ),
        (
            cfg.adapt_to_pi_aloha,
            "adapt_to_pi_aloha is not packaged; convert the state and "
            "actions on the robot side and set it false",
        ),
    ):
        if bad:
            raise SmolVLAPackageError(f"{ckpt.path}: {what}")


def camera_name(feature_key: str) -> str:
    return feature_key.rsplit(".", 1)[-1]


def obs_spec(ckpt) -> dict:
    cfg = ckpt.policy.config
    inputs = []
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
    inputs.append({"key": "state", "dtype": "float32", "shape": [cfg.robot_state_feature.shape[0]]})
    inputs.append({"key": TOKENS, "dtype": "int32", "shape": [cfg.tokenizer_max_length]})
    return {
        "format": "rtinfer-obs-spec",
        "version": 1,
        "normalisation": "in the graph",
        "inputs": inputs,
    }


def tokenizer(ckpt):
    """The checkpoint's tokenizer (its VLM processor's): what turns a task into task_tokens."""
    return ckpt.policy.model.vlm_with_expert.processor.tokenizer


def pad_id(ckpt) -> int:
    return int(tokenizer(ckpt).pad_token_id)


def tokenize(ckpt, task: str) -> np.ndarray:
    """`task` as the prefix graph's `task_tokens` [L]: what LeRobot's preprocessor feeds."""
    tok = tokenizer(ckpt)
    text = task if task.endswith("\n") else task + "\n"
    ids = tok(
        text,
        padding="max_length",
        padding_side="right",
        truncation=True,
        max_length=ckpt.policy.config.tokenizer_max_length,
    )["input_ids"]
    return np.asarray(ids, np.int32)


def modules(ckpt):
    """(prefix module, step module, names of the prefix outputs)."""
    import torch
    from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks
    from lerobot.utils.constants import OBS_STATE

    policy, model = ckpt.policy, ckpt.policy.model
    cfg = policy.config
    cams = list(cfg.image_features)
    n_layers = model.vlm_with_expert.num_vlm_layers
    names = ["prefix_mask"] + [f"{kv}{i}" for i in range(n_layers) for kv in "kv"]
    pad = pad_id(ckpt)

    class Prefix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.policy = policy

        def forward(self, *inputs):
            frames, state, tokens = inputs[: len(cams)], inputs[len(cams)], inputs[-1]
            batch = {k: f.permute(0, 3, 1, 2).float() / 255.0 for k, f in zip(cams, frames)}
            images, img_masks = policy.prepare_images(batch)
            state = ckpt.normalise(OBS_STATE, state)
            state = policy.prepare_state({OBS_STATE: state})
            tokens = tokens.long()
            embs, pad_masks, att_masks = model.embed_prefix(
                images, img_masks, tokens, tokens != pad, state=state
            )
            att_2d = make_att_2d_masks(pad_masks, att_masks)
            pos = torch.cumsum(pad_masks, dim=1) - 1
            _, kv = model.vlm_with_expert.forward(
                attention_mask=att_2d,
                position_ids=pos,
                past_key_values=None,
                inputs_embeds=[embs, None],
                use_cache=True,
                fill_kv_cache=True,
            )
            out = [pad_masks]
            for i in range(n_layers):
                out += [kv[i]["key_states"], kv[i]["value_states"]]
            return tuple(out)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.policy = policy

        def forward(self, prefix_mask, *rest):
            kvs, x_t, t = rest[:-2], rest[-2], rest[-1]
            past = {
                i: {"key_states": kvs[2 * i], "value_states": kvs[2 * i + 1]}
                for i in range(n_layers)
            }
            return model.denoise_step(prefix_mask, past, x_t, t)

    return Prefix().eval(), Step().eval(), names


def example_inputs(ckpt, seed: int = 0) -> dict[str, np.ndarray]:
    """A random observation shaped as obs_spec says (frames, state, a tokenised task)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for entry in obs_spec(ckpt)["inputs"]:
        shape = entry["shape"]
        if entry.get("kind") == "image":
            feeds[entry["key"]] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif entry["key"] == TOKENS:
            feeds[TOKENS] = tokenize(ckpt, TASK)
        else:
            feeds[entry["key"]] = rng.normal(0, 1, shape).astype(np.float32)
    return feeds


@contextmanager
def static_vision_positions(ckpt, prefix, args):
    """SmolVLM's vision embeddings compute patch position ids per image in a Python loop
    (bucketize over the patch mask), which the ONNX tracer turns into a float ScatterND that
    ONNX Runtime refuses. With static, unpadded frames those ids are one constant: record
    them in one eager run and feed that constant while exporting (same values, same sum)."""
    emb = ckpt.policy.model.vlm_with_expert.get_vlm_model().vision_model.embeddings
    seen = []
    hook = emb.position_embedding.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    prefix(*args)
    hook.remove()
    ids = seen[0].clone()

    def forward(pixel_values, patch_attention_mask):
        x = emb.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        return x + emb.position_embedding(ids)

    emb.forward = forward
    try:
        yield
    finally:
        del emb.forward


@contextmanager
def bool_counts_as_int64():
    """torch sums a bool tensor (cumsum, sum) in int64; the ONNX exporter emits the op on the
    bool itself, which ONNX Runtime refuses. Cast first, as torch does, while exporting."""
    import torch

    cumsum, tsum = torch.cumsum, torch.sum

    def _cast(x):
        return x.long() if isinstance(x, torch.Tensor) and x.dtype == torch.bool else x

    torch.cumsum = lambda x, *a, **k: cumsum(_cast(x), *a, **k)
    torch.sum = lambda x, *a, **k: tsum(_cast(x), *a, **k)
    try:
        yield
    finally:
        torch.cumsum, torch.sum = cumsum, tsum


def export(ckpt, out_dir) -> dict:
    """Write prefix.onnx and step.onnx into `out_dir`; returns what package_flow needs."""
    import torch

    check(ckpt)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix, step, names = modules(ckpt)
    spec = obs_spec(ckpt)
    obs = example_inputs(ckpt)
    keys = [e["key"] for e in spec["inputs"]]
    args = tuple(torch.from_numpy(obs[k])[None] for k in keys)
    with torch.no_grad(), static_vision_positions(ckpt, prefix, args), bool_counts_as_int64():
        outs = prefix(*args)
        torch.onnx.export(
            prefix,
            args,
            str(out_dir / "prefix.onnx"),
            input_names=keys,
            output_names=names,
            opset_version=OPSET,
            dynamo=False,
        )
        cfg = ckpt.policy.config
        x_t = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
        t = torch.ones(1)
        torch.onnx.export(
            step,
            (*outs, x_t, t),
            str(out_dir / "step.onnx"),
            input_names=[*names, "x_t", "t"],
            output_names=["v"],
            opset_version=OPSET,
            dynamo=False,
        )
    return {
        "prefix": out_dir / "prefix.onnx",
        "steps": [out_dir / "step.onnx"],
        "obs_spec": spec,
        "integrator": "euler",
        "noise_shape": (1, cfg.chunk_size, cfg.max_action_dim),
        "action_dim": cfg.action_feature.shape[0],
        "default_steps": cfg.num_steps,
    }


def reference(ckpt, obs: dict[str, np.ndarray], noise: np.ndarray, steps: int, task: str = TASK):
    """LeRobot's own chunk: preprocessor -> predict_action_chunk(noise) -> postprocessor,
    with num_steps = `steps`; [chunk_size or n_action_steps, D] float32 physical."""
    import torch
    from lerobot.utils.constants import OBS_STATE

    policy, cfg = ckpt.policy, ckpt.policy.config
    raw = {OBS_STATE: torch.from_numpy(obs["state"]), "task": task}
    for key in cfg.image_features:
        raw[key] = torch.from_numpy(obs[camera_name(key)]).permute(2, 0, 1).float() / 255.0
    batch = ckpt.pre(raw)
    saved = cfg.num_steps
    cfg.num_steps = steps
    try:
        policy.reset()
        a = policy.predict_action_chunk(batch, noise=torch.from_numpy(noise))
    finally:
        cfg.num_steps = saved
    return ckpt.post(a)[0].numpy()
