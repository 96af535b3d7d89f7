"""LeRobot's ACTPolicy looking through the cell's overhead camera: train, export, evaluate.

Runs in the LeRobot venv (`make lerobot-env`); torch and lerobot are imported inside
functions only, so this module imports anywhere.

    python -m examples.conveyor_sorting.lerobot_act_vision train --data A.npz ... --out CKPT \
        [--steps N --batch B --pool 2 --relabel A.npz]
    python -m examples.conveyor_sorting.lerobot_act_vision export --checkpoint CKPT \
        --out conveyor-act-vision [--parity-data A.npz]
    python -m examples.conveyor_sorting.lerobot_act_vision eval --model DIR --episodes 2
    python -m examples.conveyor_sorting.lerobot_act_vision latency --model DIR [--runs 500]
    python -m examples.conveyor_sorting.lerobot_act_vision probe --model DIR --data A.npz

Not shipped: the zoo holds no camera ACT (trained from scratch on two shared CPU cores it sorted
0 of 240 objects in lockstep, and its 47.7 MB graph was a fifth of the zoo). Rebuild it in the
LeRobot venv (`make lerobot-env`; `make conveyor-act-vision` runs these four into build/), with
V = .venv-lerobot/bin/python:

    $V -m examples.conveyor_sorting.collect --camera overhead --episodes 60 --out expert.npz
    $V -m examples.conveyor_sorting.lerobot_act_vision train --data expert.npz \
        --out ckpt --steps 2500 --batch 16 --threads 1
    $V -m examples.conveyor_sorting.lerobot_act_vision export --checkpoint ckpt \
        --out conveyor-act-vision --parity-data expert.npz
    $V -m examples.conveyor_sorting.lerobot_act_vision eval --model conveyor-act-vision

(the last shipped build added a DAgger file, `collect --policy conveyor-act-vision --camera
overhead`, about 20,000 rows each, and still sorted 0 of 240: a GPU host should start from
ImageNet weights and train tens of thousands of steps). tests/test_lerobot_act.py runs the
same train -> export -> eval path on one short episode.

Model: lerobot.policies.act.modeling_act.ACTPolicy with one camera,
"observation.images.overhead", through the ResNet-18 backbone LeRobot builds (torchvision
resnet18, FrozenBatchNorm2d, layer4's feature map, one token per cell; no pretrained weights
here: pretrained_backbone_weights=None, trained from scratch with the rest), plus
"observation.state" (24): gantry (8), held one-hot (4), the held class's bin one-hot (3),
the instruction as a 3x3 one-hot (9). No objects and no environment state: the classes and
positions of the objects on the belt come from the image only. use_vae=False, chunk 4.

Image path, inside the graph: the camera's uint8 frame [1, 128, 128, 3] -> the belt's band
of rows (`crop_rows`; the bins and the floor carry nothing a pick needs) -> average-pooled by
`pool` -> [0, 1] -> per-channel mean/std of the training frames (LeRobot's MEAN_STD for
VISUAL features). Actions as in lerobot_act: x, y, z relative to the cup, suction absolute,
mean/std normalised, clipped to the action limits, all in the graph.

Data: collect.py files recorded with --camera overhead (frame_overhead and the raw arrays).
--relabel adds each carry state of those files again under the other instructions (same
frame, the scripted expert's labels; lerobot_act.relabelled).

ONNX contract (opset 17, static, batch 1): overhead uint8 [1, 128, 128, 3], gantry f32
[1, 8], held f32 [1, 1], instruction i32 [1, 3] -> actions f32 [1, 4, 4]. Packaged with
models.chunk_package (obs_spec.json names the image input and its camera).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .lerobot_act import (
    DEFAULTS,
    IMPL,
    NUM_CLASSES,
    STD_FLOOR,
    D,
    H,
    _recipe_lines,
    _session,
    _stats,
    action_limits,
    action_targets,
    add_config_args,
    fit,
    relabelled,
    save_policy,
    seed_all,
    state_features,
)

CAMERA = "overhead"
FRAME_HW = (128, 128)
IMAGE_KEY = "observation.images." + CAMERA
STATE_DIM = 15 + NUM_CLASSES**2
INPUTS = (CAMERA, "gantry", "held", "instruction")
CROP_ROWS = (64, 96)  # the belt's band in the 128 x 128 overhead frame (rows 67-94) + margin
NAME = "conveyor-act-vision"


# -- data ---------------------------------------------------------------------------------
def load_data(
    paths: list[str], relabel: list[str] = (), crop_rows=CROP_ROWS
) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Training rows: band (uint8 frames' belt band, one per recorded row) and per training row
    frame (index into band), gantry, held, instruction, actions; relabelled carry states of
    the `relabel` files (which must also be in `paths`) reuse their row's frame."""
    bands, rows, lineage, base = [], [], [], 0
    for p in paths:
        with np.load(p, allow_pickle=False) as z:
            if "frame_" + CAMERA not in z.files:
                raise SystemExit(
                    f"{p}: no frame_{CAMERA} array; collect it with "
                    f"`python -m examples.conveyor_sorting.collect --camera {CAMERA}`"
                )
            frames = z["frame_" + CAMERA]
            d = {
                "gantry": z["gantry"].astype(np.float32),
                "held": z["held"].astype(np.float32),
                "instruction": z["instruction_tokens"].astype(np.int32),
                "actions": z["action_values"].astype(np.float32),
                "objects": z["objects"].astype(np.float32),
            }
        if frames.shape[1:] != (*FRAME_HW, 3):
            raise SystemExit(f"{p}: frames are {frames.shape[1:]}, not {(*FRAME_HW, 3)}")
        bands.append(np.ascontiguousarray(frames[:, crop_rows[0] : crop_rows[1]]))
        n = len(frames)
        keys = ("gantry", "held", "instruction", "actions")
        rows.append({"frame": base + np.arange(n), **{k: d[k] for k in keys}})
        lineage.append({"file": str(p), "rows": n})
        if str(p) in map(str, relabel):
            extra = {k: [] for k in ("frame", "gantry", "held", "instruction", "actions")}
            for row, obs, chunk in relabelled(d):
                for k, v in (
                    ("frame", base + row),
                    ("gantry", obs["gantry"]),
                    ("held", obs["held"]),
                    ("instruction", obs["instruction"]),
                    ("actions", chunk),
                ):
                    extra[k].append(v)
            rows.append(
                {k: np.asarray(v, d[k].dtype if k in d else np.int64) for k, v in extra.items()}
            )
            lineage.append(
                {
                    "file": str(p),
                    "relabelled_rows": len(extra["frame"]),
                    "kind": "counterfactual relabel of carry states (scripted expert), same frame",
                }
            )
        base += n
    data = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    data["band"] = np.concatenate(bands)
    return data, lineage


# -- the graph's pieces (torch) -------------------------------------------------------------
def image_input(band, pool: int):
    """uint8 (B, h, W, 3) band of the frame -> float (B, 3, h / pool, W / pool) in [0, 1]."""
    import torch

    x = band.permute(0, 3, 1, 2).float() / 255.0
    return torch.nn.functional.avg_pool2d(x, pool) if pool > 1 else x


def vision_state(gantry, held, instruction):
    """observation.state (B, 24): lerobot_act's state (15) + the instruction one-hot (9)."""
    import torch

    state, instr_oh = state_features(gantry, held, instruction)
    return torch.cat([state, instr_oh.reshape(len(gantry), -1)], dim=1)


def make_config(image_hw: tuple[int, int], **over):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.utils.constants import ACTION, OBS_STATE

    return ACTConfig(
        input_features={
            OBS_STATE: PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,)),
            IMAGE_KEY: PolicyFeature(type=FeatureType.VISUAL, shape=(3, *image_hw)),
        },
        output_features={ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(D,))},
        chunk_size=H,
        n_action_steps=H,
        vision_backbone="resnet18",
        pretrained_backbone_weights=None,
        device="cpu",
        push_to_hub=False,
        **{**DEFAULTS, **over},
    )


def image_hw(crop_rows, pool: int) -> tuple[int, int]:
    return (crop_rows[1] - crop_rows[0]) // pool, FRAME_HW[1] // pool


def build_graph(policy, stats: dict, crop_rows, pool: int):
    """The exported module: raw observation -> ACTPolicy.predict_action_chunk -> physical
    chunk (see the module docstring)."""
    import torch
    from lerobot.utils.constants import OBS_STATE

    low, high = action_limits()
    r0, r1 = crop_rows

    class ACTVisionGraph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.policy = policy
            for name in ("state", "image", "action"):
                mean, std = (torch.tensor(stats[name][k]) for k in ("mean", "std"))
                if name == "image":
                    mean, std = mean.view(1, 3, 1, 1), std.view(1, 3, 1, 1)
                self.register_buffer(f"{name}_mean", mean)
                self.register_buffer(f"{name}_std", std)
            self.register_buffer("low", torch.tensor(low))
            self.register_buffer("high", torch.tensor(high))

        def forward(self, overhead, gantry, held, instruction):
            image = (image_input(overhead[:, r0:r1], pool) - self.image_mean) / self.image_std
            state = (vision_state(gantry, held, instruction) - self.state_mean) / self.state_std
            a = self.policy.predict_action_chunk({OBS_STATE: state, IMAGE_KEY: image})
            a = a * self.action_std + self.action_mean
            a = torch.cat([a[..., :3] + gantry[:, None, :3], a[..., 3:]], dim=-1)
            return torch.maximum(torch.minimum(a, self.high), self.low)

    return ACTVisionGraph().eval()


# -- train --------------------------------------------------------------------------------
def train(
    paths: list[str],
    out: str | Path,
    *,
    steps: int = 2000,
    batch: int = 32,
    lr: float = 3e-4,
    seed: int = 0,
    relabel: list[str] = (),
    pool: int = 2,
    crop_rows=CROP_ROWS,
    threads: int = 1,
    log_every: int = 100,
    init: str | None = None,
    **cfg_over,
) -> dict:
    """Train from scratch (or from the checkpoint `init`, whose image settings must match)
    and write CKPT/model.safetensors and act.json; returns the figures."""
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.utils.constants import ACTION, OBS_STATE

    seed_all(seed, threads)
    t0 = time.perf_counter()
    data, lineage = load_data(paths, relabel, crop_rows)
    t = {k: torch.from_numpy(v) for k, v in data.items()}
    state = vision_state(t["gantry"], t["held"], t["instruction"])
    target = action_targets(t["actions"], t["gantry"])
    sample = torch.randperm(len(t["band"]), generator=torch.Generator().manual_seed(seed))[:4000]
    pixels = image_input(t["band"][sample], pool).permute(1, 0, 2, 3).reshape(3, -1).T
    stats = {
        "state": _stats(state.numpy()),
        "action": _stats(target.numpy()),
        "image": _stats(pixels.numpy()),
    }
    if init:  # the weights learned on init's normalisation: keep it
        stats = json.loads((Path(init) / "act.json").read_text())["stats"]
    sn = {n: (torch.tensor(s["mean"]), torch.tensor(s["std"])) for n, s in stats.items()}
    state = (state - sn["state"][0]) / sn["state"][1]
    target = (target - sn["action"][0]) / sn["action"][1]
    img_mean, img_std = (v.view(1, 3, 1, 1) for v in sn["image"])
    t_data = time.perf_counter() - t0
    hw = image_hw(crop_rows, pool)
    policy = ACTPolicy(make_config(hw, **cfg_over))
    if init:
        from safetensors.torch import load_file

        policy.load_state_dict(load_file(str(Path(init) / "model.safetensors")))
    n_params = sum(p.numel() for p in policy.parameters())
    n_backbone = sum(p.numel() for p in policy.model.backbone.parameters())
    pad = torch.zeros(batch, H, dtype=torch.bool)
    n = len(state)

    def next_batch(gen):
        idx = torch.randint(0, n, (batch,), generator=gen)
        image = (image_input(t["band"][t["frame"][idx]], pool) - img_mean) / img_std
        return {OBS_STATE: state[idx], IMAGE_KEY: image, ACTION: target[idx], "action_is_pad": pad}

    hist, train_s = fit(policy, next_batch, steps=steps, lr=lr, seed=seed, log_every=log_every)
    save_policy(policy, out)
    meta = {
        "implementation": IMPL,
        "command": "python -m examples.conveyor_sorting."
        "lerobot_act_vision " + " ".join(sys.argv[1:])
        if sys.argv[0].endswith("lerobot_act_vision.py")
        else None,
        "config": {
            **DEFAULTS,
            **cfg_over,
            "chunk_size": H,
            "n_action_steps": H,
            "state_dim": STATE_DIM,
            "vision_backbone": "resnet18",
            "pretrained_backbone_weights": None,
            "image_key": IMAGE_KEY,
        },
        "image": {
            "frame_hw": list(FRAME_HW),
            "crop_rows": list(crop_rows),
            "pool": pool,
            "input_hw": list(hw),
            "tokens": _tokens(policy, hw),
        },
        "params": n_params,
        "backbone_params": n_backbone,
        "data": lineage,
        "rows": n,
        "frames": len(t["band"]),
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seed": seed,
        "threads": threads,
        "init": init,
        "train_s": round(train_s, 1),
        "data_s": round(t_data, 1),
        "samples_per_s": round(steps * batch / train_s, 1),
        "loss": hist,
        "stats": stats,
    }
    (Path(out) / "act.json").write_text(json.dumps(meta, indent=1))
    return {
        k: meta[k] for k in ("params", "rows", "steps", "train_s", "data_s", "samples_per_s")
    } | {"final_l1": hist[-1]["l1"] if hist else None}


def _tokens(policy, hw) -> int:
    """Image tokens the encoder sees: the backbone's layer4 cells."""
    import torch

    with torch.no_grad():
        return int(np.prod(policy.model.backbone(torch.zeros(1, 3, *hw))["feature_map"].shape[2:]))


def load_checkpoint(ckpt: str | Path):
    """(ACTVisionGraph torch module in eval mode, meta dict)."""
    from lerobot.policies.act.modeling_act import ACTPolicy
    from safetensors.torch import load_file

    ckpt = Path(ckpt)
    meta = json.loads((ckpt / "act.json").read_text())
    im = meta["image"]
    policy = ACTPolicy(
        make_config(tuple(im["input_hw"]), **{k: meta["config"][k] for k in DEFAULTS})
    )
    policy.load_state_dict(load_file(str(ckpt / "model.safetensors")))
    policy.eval()
    return build_graph(policy, meta["stats"], im["crop_rows"], im["pool"]), meta


# -- export and package -----------------------------------------------------------------------
def obs_spec_doc() -> dict:
    return {
        "format": "rtinfer-obs-spec",
        "version": 1,
        "normalisation": "in the graph",
        "inputs": [
            {
                "key": CAMERA,
                "kind": "image",
                "dtype": "uint8",
                "shape": [*FRAME_HW, 3],
                "camera": CAMERA,
            },
            {"key": "gantry", "dtype": "float32", "shape": [8]},
            {"key": "held", "dtype": "float32", "shape": [1]},
            {"key": "instruction", "dtype": "int32", "shape": [NUM_CLASSES]},
        ],
    }


def export(
    ckpt: str | Path, out_dir: str | Path, *, parity_data: list[str] = (), parity_rows: int = 100
) -> dict:
    """Export the checkpoint to ONNX and package it as the model directory `out_dir` (its
    card: lineage, parity with torch); returns the card."""
    import tempfile

    import torch

    from examples.conveyor_sorting.config import CellConfig, action_spec
    from models.chunk_package import package_onnx
    from rtinfer.model.obs_spec import ObsSpec

    graph, meta = load_checkpoint(ckpt)
    dummy = (
        torch.zeros(1, *FRAME_HW, 3, dtype=torch.uint8),
        torch.zeros(1, 8),
        torch.full((1, 1), -1.0),
        torch.tensor([[0, 1, 2]], dtype=torch.int32),
    )
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "chunk_l0.onnx"
        # dynamo=False: as lerobot_act.export (torch 2.14's dynamo exporter writes an
        # opset-18 Split into an opset-17 graph).
        with torch.no_grad():
            torch.onnx.export(
                graph,
                dummy,
                str(onnx_path),
                input_names=list(INPUTS),
                output_names=["actions"],
                opset_version=17,
                dynamo=False,
                do_constant_folding=True,
            )
        check = parity(graph, onnx_path, parity_data, parity_rows) if parity_data else None
        card = package_onnx(
            [onnx_path],
            out_dir,
            action_spec(CellConfig(), horizon=H),
            obs=ObsSpec(obs_spec_doc()),
            card=card_of(meta, check),
        )
    return card


def parity(graph, path, files: list[str], rows: int = 100, seed: int = 0) -> dict:
    """Max |ONNX Runtime - torch| (action units: m, and suction) over `rows` recorded
    observations drawn with `seed` (full frames)."""
    import torch

    sess = _session(path)
    rng = np.random.default_rng(seed)
    worst, n = 0.0, 0
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            idx = np.sort(rng.choice(len(z["gantry"]), min(rows, len(z["gantry"])), replace=False))
            arrays = (
                z["frame_" + CAMERA][idx],
                z["gantry"][idx].astype(np.float32),
                z["held"][idx].astype(np.float32),
                z["instruction_tokens"][idx].astype(np.int32),
            )
        with torch.no_grad():
            for i in range(len(idx)):
                feed = {k: np.ascontiguousarray(a[i : i + 1]) for k, a in zip(INPUTS, arrays)}
                ref = graph(*(torch.from_numpy(v) for v in feed.values())).numpy()
                got = sess.run(["actions"], feed)[0]
                worst, n = max(worst, float(np.abs(ref - got).max())), n + 1
    return {"rows": n, "max_abs_diff": worst, "files": [str(f) for f in files]}


def card_of(meta: dict, parity_result: dict | None) -> dict:
    from importlib.metadata import version

    import torch

    recipe = Path(__file__).resolve().parents[2] / "scripts" / "lerobot_env.sh"
    training = {
        k: meta.get(k)
        for k in (
            "steps",
            "batch",
            "lr",
            "seed",
            "threads",
            "init",
            "train_s",
            "data_s",
            "samples_per_s",
        )
    }
    return {
        "name": NAME,
        "implementation": IMPL,
        "implementation_version": f"lerobot {version('lerobot')}",
        "params": meta["params"],
        "lineage": {
            "implementation": IMPL,
            "lerobot": version("lerobot"),
            "torch": torch.__version__,
            "torchvision": version("torchvision"),
            "onnx": version("onnx"),
            "onnxruntime": version("onnxruntime"),
            "config": meta["config"],
            "params": meta["params"],
            "backbone": {
                "name": "resnet18 (torchvision, as lerobot's ACT builds it: "
                "FrozenBatchNorm2d, layer4 feature map)",
                "pretrained": None,
                "params": meta["backbone_params"],
                "note": "no pretrained weights can be downloaded here: trained "
                "from scratch with the transformer; FrozenBatchNorm2d at "
                "its identity init (LeRobot freezes the batch norms)",
            },
            "image": meta["image"],
            "data": meta["data"],
            "training_rows": meta["rows"],
            "training_frames": meta["frames"],
            "train_command": meta.get("command"),
            "training": training
            | {"final_l1": meta["loss"][-1]["l1"] if meta["loss"] else None, "loss": meta["loss"]},
            "normalisation": {
                "kind": "mean_std",
                "std_floor": STD_FLOOR,
                "image": "per channel, over 4000 training frames' pixels",
                "action_xyz": "relative to the observed cup position",
            },
            "observation_features": {
                IMAGE_KEY: "the overhead frame's belt band (crop_rows), average-pooled "
                "by pool, mean/std per channel",
                "observation.state": "gantry(8) + held one-hot(4) + bin of held class "
                "one-hot(3) + instruction 3x3 one-hot(9)",
            },
            "parity": parity_result,
            "install_recipe": {
                "script": "scripts/lerobot_env.sh (make lerobot-env)",
                "steps": _recipe_lines(recipe),
            },
        },
    }


# -- lockstep evaluation and latency ----------------------------------------------------------
def lockstep(
    model_dir: str | Path,
    episodes: int = 2,
    per_episode: int = 20,
    seed: int = 7000,
    instructions: str = "all",
    write: bool = True,
) -> dict:
    """Success per instruction through the node's GraphRunner, the env rendering the camera
    the model reads (evaluate.camera_config); written into card.json "lockstep"."""
    from rtinfer.model.chunk_model import load_model

    from .config import EnvConfig
    from .evaluate import SUMMARY, camera_config, parse_instructions, run_per_instruction
    from .policy_adapter import model_factory

    cfg = camera_config(EnvConfig(), load_model(model_dir))
    t = time.perf_counter()
    r = run_per_instruction(
        model_factory(model_dir),
        parse_instructions(instructions),
        episodes=episodes,
        per_episode=per_episode,
        seed=seed,
        cfg=cfg,
    )
    out = {
        **{k: r[k] for k in SUMMARY},
        "min_success_rate": r["min_success_rate"],
        "per_instruction": r["per_instruction"],
        "episodes_per_instruction": episodes,
        "objects_per_episode": per_episode,
        "seed": seed,
        "camera": cfg.camera,
        "frame_hw": list(cfg.frame_hw),
        "wall_s": round(time.perf_counter() - t, 1),
        "command": f"python -m examples.conveyor_sorting.lerobot_act_vision eval --model "
        f"{model_dir} --episodes {episodes} --per-episode {per_episode} "
        f"--seed {seed}",
    }
    if write:
        _update_card(model_dir, "lockstep", out)
    return out


def latency(
    model_dir: str | Path,
    baseline: str | Path | None,
    runs: int = 500,
    threads: int = 1,
    write: bool = True,
) -> dict:
    """Per-chunk compute through rtinfer's GraphRunner on this CPU (the node's path: the
    obs body -> ObsSpec.feeds -> IOBinding), on a rendered observation; `baseline` (another
    chunk model, e.g. conveyor-act) runs interleaved in the same loop, for a ratio of CPU
    time (wall time on a shared host carries its stalls; CPU time much less so)."""
    from rtinfer.inference.graph_runner import GraphRunner
    from rtinfer.model.chunk_model import load_model

    from .config import EnvConfig
    from .env import ConveyorSortEnv
    from .evaluate import camera_config, expert_factory
    from .observe import obs_body

    compared = {"model": load_model(model_dir)}
    if baseline:
        compared["baseline"] = load_model(baseline)
    env = ConveyorSortEnv(camera_config(EnvConfig(), compared["model"]))
    expert = expert_factory(env)
    obs, _ = env.reset(seed=1)
    for _ in range(60):  # objects on the belt, the cup moving
        obs, *_ = env.step(expert.act(obs))
    body = obs_body(obs)
    bodies = {k: body if m.obs.images else {**body, "frames": {}} for k, m in compared.items()}
    runners = {k: GraphRunner(m, threads=threads) for k, m in compared.items()}
    wall = {k: np.zeros(runs, np.int64) for k in runners}
    cpu = {k: np.zeros(runs, np.int64) for k in runners}
    for i in range(-20, runs):  # 20 warm-up cycles
        for k, runner in runners.items():
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            runner.run(compared[k].obs.feeds(bodies[k]))
            if i >= 0:
                wall[k][i] = time.perf_counter_ns() - t0
                cpu[k][i] = time.thread_time_ns() - c0
    out = {
        "runs": runs,
        "threads": threads,
        "what": "obs body -> ObsSpec.feeds -> "
        "GraphRunner.run per chunk: wall ms and this thread's CPU ms (ONNX Runtime runs "
        "a 1-thread session on the caller's thread), models interleaved in one loop",
    }
    for k in runners:
        out[k] = {
            "path": str(compared[k].path),
            "median_ms": round(float(np.median(wall[k])) / 1e6, 3),
            "p99_ms": round(float(np.percentile(wall[k], 99)) / 1e6, 3),
            "cpu_median_ms": round(float(np.median(cpu[k])) / 1e6, 3),
            "cpu_p99_ms": round(float(np.percentile(cpu[k], 99)) / 1e6, 3),
        }
    if baseline:
        out["cpu_median_ratio"] = round(
            out["model"]["cpu_median_ms"] / out["baseline"]["cpu_median_ms"], 1
        )
    if write:
        _update_card(model_dir, "latency_cpu", out)
    return out


def probe(
    model_dir: str | Path, data: str, rows: int = 400, seed: int = 0, write: bool = True
) -> dict:
    """Does the policy look? Its chunk's mean |error| against the expert's labels on `rows`
    recorded observations (x, y in m; reaching: nothing held; carrying), fed the row's own
    frame and then another row's frame; and a cup that stays put, for scale."""
    sess = _session(Path(model_dir) / "chunk_l0.onnx")
    rng = np.random.default_rng(seed)
    with np.load(data, allow_pickle=False) as z:
        idx = np.sort(rng.choice(len(z["gantry"]), min(rows, len(z["gantry"])), replace=False))
        frames, labels = z["frame_" + CAMERA][idx], z["action_values"][idx]
        vec = (
            z["gantry"][idx].astype(np.float32),
            z["held"][idx].astype(np.float32),
            z["instruction_tokens"][idx].astype(np.int32),
        )

    def chunks(images):
        return np.stack(
            [
                sess.run(
                    ["actions"],
                    dict(zip(INPUTS, (images[i : i + 1], *(v[i : i + 1] for v in vec)))),
                )[0][0]
                for i in range(len(idx))
            ]
        )

    own, other = chunks(frames), chunks(frames[rng.permutation(len(idx))])
    out = {"data": str(data), "rows": len(idx), "seed": seed}
    stay = np.repeat(vec[0][:, None, :4], H, 1)
    for phase, m in (("reaching", vec[1][:, 0] < 0), ("carrying", vec[1][:, 0] >= 0)):
        err = {
            name: round(float(np.abs(p[m, :, :2] - labels[m, :, :2]).mean()), 4)
            for name, p in (("own_frame", own), ("other_frame", other), ("cup_stays_put", stay))
        }
        out[phase] = {"rows": int(m.sum()), **{f"xy_err_m_{k}": v for k, v in err.items()}}
    if write:
        _update_card(model_dir, "probe", out)
    return out


def _update_card(model_dir, key: str, value: dict) -> None:
    p = Path(model_dir) / "card.json"
    card = json.loads(p.read_text())
    card[key] = value
    p.write_text(json.dumps(card, indent=1) + "\n")


# -- CLI ----------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.lerobot_act_vision",
        description=__doc__.splitlines()[0],
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", nargs="+", required=True)
    t.add_argument(
        "--relabel",
        nargs="*",
        default=[],
        help="files (of --data) whose carry states to relabel under the other instructions",
    )
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--lr", type=float, default=3e-4)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--pool", type=int, default=2, help="average-pool the belt band by this")
    t.add_argument("--crop-rows", type=int, nargs=2, default=CROP_ROWS, metavar=("R0", "R1"))
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--log-every", type=int, default=100)
    t.add_argument("--init", default=None, help="checkpoint dir to start from")
    add_config_args(t)
    e = sub.add_parser("export")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--out", required=True, help="the model directory to write")
    e.add_argument("--parity-data", nargs="*", default=[])
    e.add_argument("--parity-rows", type=int, default=100)
    v = sub.add_parser("eval")
    v.add_argument("--model", required=True)
    v.add_argument("--episodes", type=int, default=2, help="per instruction")
    v.add_argument("--per-episode", type=int, default=20)
    v.add_argument("--seed", type=int, default=7000)
    v.add_argument("--instructions", default="all")
    pr = sub.add_parser("probe", help="does it look? error with its own frame vs another's")
    pr.add_argument("--model", required=True)
    pr.add_argument("--data", required=True)
    pr.add_argument("--rows", type=int, default=400)
    lat = sub.add_parser("latency")
    lat.add_argument("--model", required=True)
    lat.add_argument("--baseline", default="models/zoo/conveyor-act")
    lat.add_argument("--runs", type=int, default=500)
    lat.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    if a.cmd == "train":
        r = train(
            a.data,
            a.out,
            steps=a.steps,
            batch=a.batch,
            lr=a.lr,
            seed=a.seed,
            relabel=a.relabel,
            pool=a.pool,
            crop_rows=tuple(a.crop_rows),
            threads=a.threads,
            log_every=a.log_every,
            init=a.init,
            **{k: getattr(a, k) for k in DEFAULTS},
        )
    elif a.cmd == "export":
        card = export(a.checkpoint, a.out, parity_data=a.parity_data, parity_rows=a.parity_rows)
        r = {"out": a.out, "params": card["params"], "parity": card["lineage"]["parity"]}
    elif a.cmd == "eval":
        r = lockstep(a.model, a.episodes, a.per_episode, a.seed, a.instructions)
    elif a.cmd == "probe":
        r = probe(a.model, a.data, a.rows)
    else:
        r = latency(a.model, a.baseline or None, a.runs, a.threads)
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
