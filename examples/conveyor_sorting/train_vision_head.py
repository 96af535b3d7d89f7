"""Fine-tune conveyor-vision's chunk head on the encoder's own output (DAgger through
perception), in the LeRobot venv:

    .venv-lerobot/bin/python -m examples.conveyor_sorting.train_vision_head \
        --data A.npz B.npz ... --weights vision.pt --out DIR [--steps 3000] \
        [--head models/zoo/conveyor-act]

then `train_vision --export-only --checkpoint vision.pt --head DIR/head` joins it to the
encoder. conveyor-act's head was trained on the cell's true object positions. Through the
camera, an object the cup descends onto shrinks to a 1 px ring (its row flickers out of
`objects`), positions near the cup are off by about 1 cm, and the vision policy drives into
states conveyor-act never visited (trailing an object by 20 cm at belt speed), where it
descended onto nothing (docs/benchmarks.md, conveyor-vision: the diagnosis). Here the
head learns from what it will see: every recorded frame (collect.py files with --camera
overhead) decoded by the encoder, labelled with the scripted expert's chunk for that state
(collect.py's labels: the expert sees the cell), carry states also under other instructions
(lerobot_act's counterfactual relabelling). It starts from conveyor-act's weights, recovered
from its graph (`recover_head`, checked against it), and keeps its normalisation, so the
graph's inputs mean what they meant.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from .lerobot_act import (
    DEFAULTS,
    IMPL,
    NUM_CLASSES,
    OBS_KEYS,
    SLOT_DIM,
    STATE_DIM,
    STD_FLOOR,
    D,
    Exported,
    H,
    action_targets,
    export,
    features,
    fit,
    make_config,
    relabel_rows,
    save_policy,
    seed_all,
)

PARITY_MAX = 1e-4  # the recovered policy against the graph it came from (max |diff|, m)


def _initializers(path: Path) -> dict:
    import onnx
    import torch
    from onnx import numpy_helper

    return {
        i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
        for i in onnx.load(str(path)).graph.initializer
    }


def recover_head(graph_path: Path, data: dict[str, np.ndarray]):
    """(ACTPolicy, stats) from a graph lerobot_act exported (2 encoder layers, 1 decoder
    layer). The exporter keeps named parameters under their names; it folds each attention's
    q, k, v projections, both feed-forward layers and the action head into anonymous MatMul
    weights (transposed) and Add biases, in the graph's order, and the two positional
    embeddings into [tokens, 1, dim] constants. ValueError unless the rebuilt policy gives
    the graph's actions on 200 rows of `data` within PARITY_MAX."""
    import onnxruntime as ort
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy

    w = _initializers(graph_path)
    num = lambda n: int(re.search(r"(\d+)$", n).group(1))  # noqa: E731
    mats = [
        w[n].T.contiguous()
        for n in sorted((n for n in w if n.startswith("onnx::MatMul_")), key=num)
    ]
    vecs = [
        w[n]
        for n in sorted((n for n in w if n.startswith("onnx::Add_") and w[n].dim() == 1), key=num)
    ]
    pos = {
        tuple(w[n].shape): w[n][:, 0, :]
        for n in w
        if n.startswith(("onnx::Split_", "onnx::Add_")) and w[n].dim() == 3
    }
    sd = {n[len("policy.") :]: v for n, v in w.items() if n.startswith("policy.")}
    dim = DEFAULTS["dim_model"]
    sd["model.encoder_1d_feature_pos_embed.weight"] = pos[(3, 1, dim)]
    sd["model.decoder_pos_embed.weight"] = pos[(H, 1, dim)]
    attn = [
        "model.encoder.layers.0.self_attn",
        "model.encoder.layers.1.self_attn",
        "model.decoder.layers.0.self_attn",
        "model.decoder.layers.0.multihead_attn",
    ]
    ff = ["model.encoder.layers.0", "model.encoder.layers.1", "model.decoder.layers.0"]
    # graph order: enc0 qkv ff, enc1 qkv ff, dec self qkv, dec cross qkv, dec ff, action head
    order = [
        (attn[0], 3),
        (ff[0], 2),
        (attn[1], 3),
        (ff[1], 2),
        (attn[2], 3),
        (attn[3], 3),
        (ff[2], 2),
        ("model.action_head", 1),
    ]
    m = b = 0
    for name, n in order:
        if n == 3:
            sd[f"{name}.in_proj_weight"] = torch.cat(mats[m : m + 3])
            sd[f"{name}.in_proj_bias"] = torch.cat(vecs[b : b + 3])
            b += 3
        elif n == 2:
            sd[f"{name}.linear1.weight"], sd[f"{name}.linear2.weight"] = mats[m], mats[m + 1]
        else:
            sd[f"{name}.weight"] = mats[m]
        m += n
    policy = ACTPolicy(make_config(data["objects"].shape[1]))
    policy.load_state_dict(sd)  # strict: a graph of another shape fails here
    policy.eval()
    stats = {
        k: {"mean": w[f"{k}_mean"].tolist(), "std": w[f"{k}_std"].tolist()}
        for k in ("state", "env", "action")
    }
    graph, sess = (
        Exported.build(policy, stats),
        ort.InferenceSession(str(graph_path), providers=["CPUExecutionProvider"]),
    )
    worst = 0.0
    for i in np.random.default_rng(0).integers(0, len(data["gantry"]), 200):
        feeds = {k: data[k][i : i + 1] for k in OBS_KEYS}
        with torch.no_grad():
            ours = graph(*(torch.from_numpy(feeds[k]) for k in OBS_KEYS)).numpy()
        worst = max(worst, float(np.abs(sess.run(None, feeds)[0] - ours).max()))
    if worst > PARITY_MAX:
        raise ValueError(
            f"{graph_path}: the recovered policy differs from the graph by "
            f"{worst:.2e} (> {PARITY_MAX}): not a graph lerobot_act exported"
        )
    return policy, stats, worst


def decode(weights: str, files: list[str], keep: int) -> dict[str, np.ndarray]:
    """Every row of the collect.py files, its `objects` replaced by what the encoder
    (weights, at `keep` visual tokens) decodes from the row's overhead frame."""
    import torch

    from .config import CellConfig
    from .vision import VisionConfig, VisionEncoder

    enc = VisionEncoder(VisionConfig(), CellConfig())
    enc.load_state_dict(torch.load(weights, weights_only=True))
    enc.eval()
    parts = []
    for f in files:
        with np.load(f) as z:
            img, gantry = z["frame_overhead"], z["gantry"].astype(np.float32)
            rows = {
                "gantry": gantry,
                "held": z["held"].astype(np.float32),
                "instruction": z["instruction_tokens"].astype(np.int32),
                "actions": z["action_values"].astype(np.float32),
            }
        seen = np.empty((len(img), VisionConfig().slots, 4), np.float32)
        with torch.no_grad():
            for s in range(0, len(img), 256):
                out = enc(torch.from_numpy(img[s : s + 256]), keep)
                seen[s : s + 256] = enc.objects_and_held(
                    out, torch.from_numpy(gantry[s : s + 256])
                )[0]
        parts.append({"objects": seen, **rows})
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", required=True, help="collect.py files with frames")
    ap.add_argument("--weights", required=True, help="the encoder's weights (.pt)")
    ap.add_argument("--head", default="models/zoo/conveyor-act", help="the head to start from")
    ap.add_argument("--out", required=True)
    ap.add_argument("--keep", type=int, default=256, help="visual tokens kept when decoding")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument(
        "--per-state", type=int, default=1, help="other instructions per carry state (relabelled)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    import torch
    from lerobot.utils.constants import ACTION, OBS_ENV_STATE, OBS_STATE

    seed_all(a.seed, a.threads)
    head, out = Path(a.head), Path(a.out)
    t0 = time.perf_counter()
    data = decode(a.weights, a.data, a.keep)
    policy, stats, parity = recover_head(head / "chunk_l0.onnx", data)
    relabelled = relabel_rows(data, per_state=a.per_state, seed=a.seed)
    print(
        f"{len(data['gantry'])} rows decoded, {len(relabelled['gantry'])} relabelled, "
        f"head recovered (parity {parity:.1e}) in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    rows = {k: torch.from_numpy(np.concatenate([data[k], relabelled[k]])) for k in data}
    state, env = features(rows["objects"], rows["gantry"], rows["held"], rows["instruction"])
    target = action_targets(rows["actions"], rows["gantry"])
    norm = {k: (torch.tensor(s["mean"]), torch.tensor(s["std"])) for k, s in stats.items()}
    state = (state - norm["state"][0]) / norm["state"][1]
    env = (env - norm["env"][0]) / norm["env"][1]
    target = (target - norm["action"][0]) / norm["action"][1]
    pad = torch.zeros(a.batch, H, dtype=torch.bool)

    def next_batch(gen):
        idx = torch.randint(0, len(state), (a.batch,), generator=gen)
        return {
            OBS_STATE: state[idx],
            OBS_ENV_STATE: env[idx],
            ACTION: target[idx],
            "action_is_pad": pad,
        }

    hist, train_s = fit(policy, next_batch, steps=a.steps, lr=a.lr, seed=a.seed, log_every=250)
    ckpt = out / "ckpt"
    save_policy(policy, ckpt)
    k = data["objects"].shape[1]
    meta = {
        "implementation": IMPL,
        "visible_k": k,
        "chunk": H,
        "command": "python -m examples.conveyor_sorting.train_vision_head "
        + " ".join(sys.argv[1:]),
        "config": {
            **DEFAULTS,
            "chunk_size": H,
            "n_action_steps": H,
            "state_dim": STATE_DIM,
            "env_state_dim": SLOT_DIM * k + NUM_CLASSES**2,
            "action_dim": D,
        },
        "params": sum(p.numel() for p in policy.parameters()),
        "data": [
            {"file": f, "objects": f"decoded by {a.weights} at {a.keep} tokens"} for f in a.data
        ]
        + [{"relabelled_rows": len(relabelled["gantry"]), "per_state": a.per_state}],
        "rows": len(state),
        "steps": a.steps,
        "batch": a.batch,
        "lr": a.lr,
        "seed": a.seed,
        "threads": a.threads,
        "train_s": round(train_s, 1),
        "init": f"{head} (recovered from its graph, parity {parity:.1e})",
        "loss": hist,
        "normalisation": {
            "kind": "mean_std",
            "std_floor": STD_FLOOR,
            "action_xyz": "relative to the observed cup position",
            "stats": f"{head}'s, unchanged",
        },
        "stats": stats,
    }
    (ckpt / "act.json").write_text(json.dumps(meta, indent=1))
    head_out = out / "head"
    head_out.mkdir(parents=True, exist_ok=True)
    result = export(ckpt, head_out / "chunk_l0.onnx")
    shutil.copy(head / "action_spec.json", head_out / "action_spec.json")
    head_card = json.loads((head / "card.json").read_text())
    (head_out / "card.json").write_text(
        json.dumps(
            {
                "kind": "chunk",
                "name": f"{head_card.get('name', head.name)}-through-vision",
                "params": meta["params"],
                "from": head_card.get("name", head.name),
                "training": {
                    k2: meta[k2] for k2 in ("steps", "batch", "lr", "train_s", "init", "rows")
                }
                | {"final_l1": hist[-1]["l1"] if hist else None, "data": meta["data"]},
                "onnx_run_us": result["onnx_run_us"],
            },
            indent=1,
        )
    )
    print(
        json.dumps(
            {
                "head": str(head_out),
                "train_s": round(train_s, 1),
                "final_l1": hist[-1]["l1"] if hist else None,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
