"""What visual-token pruning buys and costs conveyor-vision: time against kept tokens, and
the perception and sorting it keeps.

    python -m examples.conveyor_sorting.vision_tokens --weights W.pt \
        --model models/zoo/conveyor-vision --data held_out.npz [--episodes 3] [--write-card]

- time: the encoder alone (the visual tokens are its prefill) exported at each kept-token
  count, and the shipped graph at each budget level (encoder + chunk head: the time to the
  chunk, this one-shot policy's TTFT), one ONNX Runtime thread as the node runs it, every
  graph timed in interleaved rounds; median and p99 ms and the ratio to all tokens.
- perception: per object on held-out frames (train_vision.score) at each count.
- sorting: lockstep success per instruction of each shipped level (the camera env renders
  the frame the policy sees), on the card's held-out seed.
--write-card puts it into the model's card.json as "visual_tokens" and the levels' success.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from .config import CellConfig, EnvConfig
from .evaluate import all_instructions, run_per_instruction
from .policy_adapter import model_factory
from .train_vision import load, score
from .vision import ExportedEncoder, VisionConfig, VisionEncoder

KEEPS = (256, 192, 128, 96, 77, 64, 48, 32)
SEED = 7000  # card_eval's held-out scenes


def session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def timings(graphs: dict[str, tuple], rounds: int, per_round: int) -> dict[str, dict]:
    """{name: (session, feeds)} -> {name: p50/p99 ms}, rounds interleaved across graphs."""
    samples = {name: [] for name in graphs}
    for s, feeds in graphs.values():
        for _ in range(5):
            s.run(None, feeds)
    for _ in range(rounds):
        for name, (s, feeds) in graphs.items():
            for _ in range(per_round):
                t0 = time.perf_counter_ns()
                s.run(None, feeds)
                samples[name].append(time.perf_counter_ns() - t0)
    return {
        name: {
            "p50_ms": round(float(np.median(v)) / 1e6, 3),
            "p99_ms": round(float(np.percentile(v, 99)) / 1e6, 3),
            "runs": len(v),
        }
        for name, v in samples.items()
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--model", default="models/zoo/conveyor-vision")
    ap.add_argument("--data", nargs="+", required=True, help="frames to score perception on")
    ap.add_argument("--holdout", type=int, default=2)
    ap.add_argument(
        "--episodes",
        type=int,
        default=3,
        help="lockstep episodes per instruction at level 0 (full tokens)",
    )
    ap.add_argument(
        "--pruned-episodes",
        type=int,
        default=1,
        help="lockstep episodes per instruction at the pruned levels",
    )
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--write-card", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg, cell, model_dir = VisionConfig(), CellConfig(), Path(a.model)
    enc = VisionEncoder(cfg, cell)
    enc.load_state_dict(torch.load(a.weights, weights_only=True))
    enc.eval()
    _, val = load(a.data, cfg, cell, a.holdout)
    frame = val["image"][len(val["image"]) // 2][None]
    gantry = torch.from_numpy(val["gantry"][len(val["image"]) // 2][None])
    graphs, perception = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for keep in KEEPS:
            f = Path(tmp) / f"encoder_{keep}.onnx"
            torch.onnx.export(
                ExportedEncoder(enc, keep),
                (torch.from_numpy(frame), gantry),
                str(f),
                dynamo=False,
                input_names=["overhead", "gantry"],
                output_names=["objects", "held", "gantry_seen"],
                opset_version=17,
            )
            graphs[f"encoder_{keep}"] = (session(f), {"overhead": frame, "gantry": gantry.numpy()})
            perception.append(score(enc, val, keep))
        card = json.loads((model_dir / "card.json").read_text())
        vec = {
            "gantry": gantry.numpy(),
            "held": np.full((1, 1), -1.0, np.float32),
            "instruction": np.array([[0, 1, 2]], np.int32),
            "overhead": frame,
        }
        for entry in card["levels"]:
            s = session(model_dir / f"chunk_l{entry['level']}.onnx")
            graphs[f"level_{entry['level']}"] = (s, {i.name: vec[i.name] for i in s.get_inputs()})
        times = timings(graphs, a.rounds, 10)
    full = times["encoder_256"]["p50_ms"]
    curve = [
        {
            "visual_tokens": keep,
            "encoder": times[f"encoder_{keep}"],
            "encoder_vs_all": round(times[f"encoder_{keep}"]["p50_ms"] / full, 3),
            "perception": p,
        }
        for keep, p in zip(KEEPS, perception)
    ]
    success = {}
    for entry in card["levels"]:
        lvl = entry["level"]
        success[lvl] = run_per_instruction(
            model_factory(model_dir, level=lvl),
            all_instructions(),
            episodes=a.episodes if lvl == 0 else a.pruned_episodes,
            per_episode=20,
            seed=SEED,
            cfg=EnvConfig(camera="overhead", frame_hw=(cfg.image, cfg.image)),
        )
        entry["chunk"] = times[f"level_{lvl}"]
        entry["success"] = {
            k: success[lvl][k]
            for k in (
                "spawned",
                "correct",
                "wrong",
                "missed",
                "dropped",
                "success_rate",
                "min_success_rate",
                "episodes",
            )
        }
        entry["success"]["per_instruction"] = {
            k: v["success_rate"] for k, v in success[lvl]["per_instruction"].items()
        }
        entry["success"]["seed"] = SEED
        print(json.dumps({"level": lvl, **entry["success"]}), flush=True)
    out = {
        "curve": curve,
        "rounds": a.rounds,
        "threads": 1,
        "note": "encoder_N: the encoder alone at N kept visual tokens (of "
        f"{cfg.tokens}); level_L: the shipped graph (encoder + chunk head)",
    }
    print(json.dumps(out, indent=1))
    if a.write_card:
        card["visual_tokens"] = out
        (model_dir / "card.json").write_text(json.dumps(card, indent=1))


if __name__ == "__main__":
    main()
