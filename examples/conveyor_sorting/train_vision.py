"""Train the conveyor-vision encoder (vision.py) and ship models/zoo/conveyor-vision.

    python -m examples.conveyor_sorting.train_vision --data A.npz B.npz --steps 3000 \
        --out models/zoo/conveyor-vision [--head models/zoo/conveyor-act]

The data are collect.py files recorded with `--camera overhead` (frames and the cell's own
labels: the objects on the belt, the class on the cup). The encoder learns, from pixels
alone, the `objects` and `held` arrays that conveyor-act's graph reads; each budget level is
the encoder at one number of kept visual tokens, joined to --head's graph unchanged
(onnx.compose: the graph's inputs are the camera's frame, the gantry and the instruction):
conveyor-act's, or that head fine-tuned on this encoder's output (train_vision_head.py).
Training runs every level's token count (a random keep per batch), so one set of weights
serves them all. The last episodes of each file are held out and scored per object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import compose

from rtinfer.model.manifest import write_manifest

from .config import CellConfig
from .vision import ExportedEncoder, VisionConfig, VisionEncoder, losses, targets

KEEP_FRACTIONS = (1.0, 0.5, 0.3)  # level 0, 1, 2: the visual tokens each level keeps
MATCH_M = 0.02  # a detection within 2 cm of an object, of its class, counts
NEAR_CUP_M = 0.05  # an object this close to a cup that holds nothing is about
# to be picked, and mostly hidden: only a 1 px ring shows


def load(files: list[str], cfg: VisionConfig, cell: CellConfig, holdout: int):
    """(train, val) dicts of arrays: images and targets; the last `holdout` episodes of each
    file are val."""
    parts = {"train": [], "val": []}
    for f in files:
        d = np.load(f)
        img = d["frame_overhead"]
        if img.shape[1:] != (cfg.image, cfg.image, 3):
            raise SystemExit(f"{f}: frames are {img.shape[1:]}, want {cfg.image}x{cfg.image}x3")
        ep = d["episode"]
        val = ep > ep.max() - holdout
        t = targets(cfg, cell, d["objects"], d["gantry"], d["held"])
        rows = {
            "image": img,
            "objects": d["objects"],
            "held_value": d["held"],
            "gantry": d["gantry"],
            **t,
        }
        for name, mask in (("train", ~val), ("val", val)):
            parts[name].append({k: v[mask] for k, v in rows.items()})
    return tuple(
        {k: np.concatenate([p[k] for p in parts[s]]) for k in parts[s][0]} for s in ("train", "val")
    )


def near_cup(objects: np.ndarray, gantry: np.ndarray) -> np.ndarray:
    """[N, K] bool: the valid objects within NEAR_CUP_M of a cup that holds nothing (the
    picks: an object the cup hovers over or descends onto)."""
    d = np.hypot(objects[..., 1] - gantry[:, None, 0], objects[..., 2] - gantry[:, None, 1])
    return (objects[..., 3] > 0.5) & (d < NEAR_CUP_M) & (gantry[:, None, 7] < 0.5)


def batch(data: dict, idx: np.ndarray) -> tuple[torch.Tensor, dict]:
    t = {k: torch.from_numpy(data[k][idx]) for k in ("obj", "cls", "off", "score", "held")}
    return torch.from_numpy(data["image"][idx]), t


@torch.no_grad()
def score(model: VisionEncoder, data: dict, keep: int, rows: int = 2000) -> dict:
    """Per object on held-out frames: found (same class within MATCH_M), missed, false
    detections; held class accuracy; the mean position error of the found ones (m)."""
    model.eval()
    found = missed = false = held_ok = n = near_found = near_missed = 0
    err = []
    step = max(1, len(data["image"]) // rows)
    for s in range(0, len(data["image"]), 256 * step):
        idx = np.arange(s, min(s + 256 * step, len(data["image"])), step)
        objects, held = model.objects_and_held(
            model(torch.from_numpy(data["image"][idx]), keep), torch.from_numpy(data["gantry"][idx])
        )
        objects, held = objects.numpy(), held.numpy()
        truth = data["objects"][idx]
        near = near_cup(truth, data["gantry"][idx])
        n += len(idx)
        held_ok += int((held[:, 0] == data["held_value"][idx, 0]).sum())
        for p, t, t_near in zip(objects, truth, near):
            pv = p[p[:, 3] > 0.5]
            used = np.zeros(len(pv), bool)
            for o, o_near in zip(t[t[:, 3] > 0.5], t_near[t[:, 3] > 0.5]):
                d = np.hypot(pv[:, 1] - o[1], pv[:, 2] - o[2])
                d[(pv[:, 0] != o[0]) | used] = np.inf
                j = int(np.argmin(d)) if len(d) else -1
                hit = j >= 0 and d[j] <= MATCH_M
                near_found, near_missed = (
                    near_found + int(o_near and hit),
                    near_missed + int(o_near and not hit),
                )
                if hit:
                    used[j], found = True, found + 1
                    err.append(d[j])
                else:
                    missed += 1
            false += int((~used).sum())
    model.train()
    return {
        "keep": keep,
        "frames": n,
        "objects": found + missed,
        "found": found,
        "missed": missed,
        "false": false,
        "recall": found / max(1, found + missed),
        "held_accuracy": held_ok / max(1, n),
        "near_cup": {
            "objects": near_found + near_missed,
            "recall": near_found / max(1, near_found + near_missed),
        },
        "position_error_mm": {
            "mean": 1e3 * float(np.mean(err)) if err else None,
            "p99": 1e3 * float(np.percentile(err, 99)) if err else None,
        },
    }


def train(
    model: VisionEncoder,
    data: dict,
    steps: int,
    bs: int,
    lr: float,
    seed: int,
    keeps: list[int],
    log,
    near_fraction: float = 0.0,
) -> dict:
    """near_fraction: that share of each batch is drawn from the frames with an object near
    a cup that holds nothing (near_cup): the picks, rare among all frames, are where a miss
    costs an object."""
    rng = np.random.default_rng(seed)
    picks = np.flatnonzero(near_cup(data["objects"], data["gantry"]).any(1))
    n_near = int(round(bs * near_fraction)) if len(picks) else 0
    log(f"{len(picks)} frames with an object near the cup; {n_near} of {bs} a batch")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.05)
    t0, run = time.perf_counter(), {}
    for step in range(steps):
        idx = np.concatenate(
            [rng.choice(picks, n_near), rng.integers(0, len(data["image"]), bs - n_near)]
        )
        image, t = batch(data, idx)
        parts = losses(model(image, int(rng.choice(keeps))), t)
        loss = sum(parts.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        for k, v in parts.items():
            run[k] = 0.98 * run.get(k, v.item()) + 0.02 * v.item()
        if step % 100 == 0 or step == steps - 1:
            log(
                f"step {step} {time.perf_counter() - t0:.0f}s "
                + " ".join(f"{k} {v:.4f}" for k, v in run.items())
            )
    return {
        "steps": steps,
        "batch": bs,
        "lr": lr,
        "seed": seed,
        "keeps": keeps,
        "near_cup_fraction": near_fraction,
        "near_cup_frames": int(len(picks)),
        "train_s": round(time.perf_counter() - t0, 1),
        "final_losses": {k: round(v, 5) for k, v in run.items()},
    }


def export(model: VisionEncoder, head: Path, keep: int, out: Path, held: bool = True) -> None:
    """out: image -> encoder at `keep` tokens -> head's graph (objects, and held unless the
    robot sends it, fed from the encoder)."""
    model.eval()
    enc_path = out.with_suffix(".encoder.onnx")
    image = torch.zeros(1, model.cfg.image, model.cfg.image, 3, dtype=torch.uint8)
    gantry = torch.zeros(1, 8)
    fed = ["objects", "held", "gantry_seen"] if held else ["objects", "gantry_seen"]
    torch.onnx.export(
        ExportedEncoder(model, keep, held),
        (image, gantry),
        str(enc_path),
        dynamo=False,
        input_names=["overhead", "gantry"],
        output_names=fed,
        opset_version=17,
    )
    enc = compose.add_prefix(
        onnx.load(str(enc_path)), "enc/", rename_inputs=False, rename_outputs=False
    )
    act = compose.add_prefix(
        onnx.load(str(head)), "act/", rename_inputs=False, rename_outputs=False
    )
    act.ir_version = enc.ir_version = max(act.ir_version, enc.ir_version)
    merged = compose.merge_models(enc, act, io_map=[(k, k.replace("_seen", "")) for k in fed])
    onnx.checker.check_model(merged)
    onnx.save(merged, str(out))
    enc_path.unlink()
    model.train()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", nargs="+", required=True)
    ap.add_argument("--out", default="models/zoo/conveyor-vision")
    ap.add_argument(
        "--head",
        default="models/zoo/conveyor-act",
        help="the chunk policy whose objects/held inputs the encoder feeds",
    )
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--holdout", type=int, default=2, help="episodes per file held out")
    ap.add_argument("--checkpoint", default=None, help="start from these weights (.pt)")
    ap.add_argument(
        "--near-cup",
        type=float,
        default=0.0,
        help="share of each batch from frames with an object near the cup (picks)",
    )
    ap.add_argument(
        "--held-input",
        action="store_true",
        help="the robot sends `held` (the class on the cup) as a vector input",
    )
    ap.add_argument(
        "--export-only",
        action="store_true",
        help="with --checkpoint: no training, export and score only",
    )
    ap.add_argument(
        "--save-weights",
        default=None,
        help="also save the encoder's weights here (.pt; vision_tokens.py reads them)",
    )
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    cfg, cell = VisionConfig(), CellConfig()
    head, out = Path(a.head), Path(a.out)
    data, val = load(a.data, cfg, cell, a.holdout)
    print(f"train {len(data['image'])} frames, val {len(val['image'])}", flush=True)
    model = VisionEncoder(cfg, cell)
    if a.checkpoint:
        model.load_state_dict(torch.load(a.checkpoint, weights_only=True))
    keeps = [max(cfg.slots, round(f * cfg.tokens)) for f in KEEP_FRACTIONS]
    training = (
        {"from": a.checkpoint}
        if a.export_only
        else train(
            model,
            data,
            a.steps,
            a.batch,
            a.lr,
            a.seed,
            keeps,
            lambda s: print(s, flush=True),
            a.near_cup,
        )
    )
    out.mkdir(parents=True, exist_ok=True)
    if a.save_weights:
        torch.save(model.state_dict(), a.save_weights)
    graphs, levels = [], []
    for level, keep in enumerate(keeps):
        f = out / f"chunk_l{level}.onnx"
        export(model, head / "chunk_l0.onnx", keep, f, held=not a.held_input)
        graphs.append(
            {
                "level": level,
                "file": f.name,
                "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
                "bytes": f.stat().st_size,
            }
        )
        levels.append(
            {"level": level, "visual_tokens": keep, "perception": score(model, val, keep)}
        )
        print(json.dumps(levels[-1]), flush=True)
    write_manifest(
        out, {"format": "rtinfer-graphs", "version": 2, "kind": "chunk", "graphs": graphs}
    )
    shutil.copy(head / "action_spec.json", out / "action_spec.json")
    (out / "obs_spec.json").write_text(
        json.dumps(
            {
                "format": "rtinfer-obs-spec",
                "version": 1,
                "normalisation": "in the graph",
                "inputs": [
                    {
                        "key": "overhead",
                        "kind": "image",
                        "dtype": "uint8",
                        "shape": [cfg.image, cfg.image, 3],
                        "camera": "overhead",
                    },
                    {"key": "gantry", "dtype": "float32", "shape": [8]},
                    *([{"key": "held", "dtype": "float32", "shape": [1]}] if a.held_input else []),
                    {"key": "instruction", "dtype": "int32", "shape": [3]},
                ],
            },
            indent=1,
        )
    )
    head_card = json.loads((head / "card.json").read_text())
    params = sum(p.numel() for p in model.parameters())
    card = {
        "kind": "chunk",
        "name": out.name,
        "levels": levels,
        "implementation": "examples.conveyor_sorting.vision.VisionEncoder + "
        f"{head_card.get('name', head.name)}'s graph",
        "params": params + int(head_card.get("params", 0)),
        "encoder": {
            "config": cfg.to_dict(),
            "params": params,
            "visual_tokens": cfg.tokens,
            "patch_px": cfg.image // cfg.grid,
            "held": "a vector input: the robot's"
            if a.held_input
            else "from the image (the encoder's held query)",
        },
        "head": {
            "model": head_card.get("name", head.name),
            "params": head_card.get("params"),
            "sha256": hashlib.sha256((head / "chunk_l0.onnx").read_bytes()).hexdigest(),
        },
        "lineage": {
            "data": [
                {"file": f, "summary": json.loads(str(np.load(f)["summary"]))} for f in a.data
            ],
            "training": training,
            "torch": torch.__version__,
            "onnx": onnx.__version__,
        },
    }
    (out / "card.json").write_text(json.dumps(card, indent=1))
    print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
