"""python -m examples.lerobot_flow {package,tiny,bench} (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import sys

from models.chunk_package import PackageError
from rtinfer.realtime.complaints import say


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m examples.lerobot_flow",
        description="LeRobot SmolVLA / Diffusion Policy -> rtinfer flow",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("package", help="a LeRobot checkpoint directory -> a flow model directory")
    p.add_argument("--checkpoint", required=True, help="saved with save_pretrained (+ processors)")
    p.add_argument("--out", required=True)
    p.add_argument("--vlm", default=None, help="SmolVLA: local SmolVLM config/processor dir")
    p.add_argument("--action-spec", default=None, help="default: CHECKPOINT/action_spec.json")
    p.add_argument("--levels", default=None, help="step counts, level 0 first: 10,4,2,1")
    p.add_argument("--parity-obs", type=int, default=3, help="observations checked per level")
    t = sub.add_parser("tiny", help="a small checkpoint with random weights (no hub)")
    t.add_argument("kind", choices=["smolvla", "diffusion"])
    t.add_argument("--out", required=True)
    t.add_argument(
        "--vlm", default=None, help="smolvla: where to write the VLM dir (default OUT/vlm)"
    )
    t.add_argument("--vlm-size", default="tiny", choices=["tiny", "smolvlm2-500m"])
    t.add_argument("--image", type=int, default=None, help="frame side in pixels")
    b = sub.add_parser("bench", help="latency per level, prefix and steps apart")
    b.add_argument("model")
    b.add_argument("--runs", type=int, default=50)
    b.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "package":
            from examples.lerobot_flow.package import package

            levels = [int(k) for k in a.levels.split(",")] if a.levels else None
            r = package(
                a.checkpoint,
                a.out,
                vlm=a.vlm,
                spec=a.action_spec,
                levels=levels,
                parity_obs=a.parity_obs,
            )
            r = {"out": a.out, "levels": r["levels"]}
        elif a.cmd == "tiny":
            from pathlib import Path

            from examples.lerobot_flow import tiny

            if a.kind == "smolvla":
                vlm = tiny.vlm_dir(a.vlm or Path(a.out) / "vlm", a.vlm_size)
                size = a.image or tiny.VLM_SIZES[a.vlm_size]["vision"]["image_size"]
                # SmolVLA's own defaults (50-step chunk, 48 tokens, 32-wide state/action)
                # beside a VLM of the real size; small ones beside the tiny VLM.
                shape = {} if a.vlm_size == "tiny" else dict(chunk=50, tokens=48, max_dim=32)
                r = {
                    "checkpoint": str(tiny.smolvla(a.out, vlm, image_hw=size, **shape)),
                    "vlm": str(vlm),
                }
            else:
                r = {"checkpoint": str(tiny.diffusion(a.out, image_hw=a.image or 0))}
        else:
            from examples.lerobot_flow.bench import bench

            r = bench(a.model, runs=a.runs, threads=a.threads)
    except (PackageError, ValueError) as e:
        say("lerobot_flow", str(e), error=False)
        return 2
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
