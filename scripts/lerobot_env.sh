#!/usr/bin/env bash
# Build the LeRobot venv used by examples/conveyor_sorting/lerobot_act.py (ACT train / ONNX export / lockstep eval).
#
#   scripts/lerobot_env.sh [VENV]        # or LEROBOT_VENV=path scripts/lerobot_env.sh
#
# Default VENV: .venv-lerobot in the repo root. Order matters:
#  1. torch/torchvision first, at the versions that lie on this machine's disk (pip takes them
#     from there; never a CUDA download from the registry);
#  2. lerobot with --no-deps (its declared deps would pull a different torch and much more);
#  3. only the packages its ACT import path needs, pinned;
#  4. this repo, editable and --no-deps, plus what the conveyor collector / evaluator import.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-${LEROBOT_VENV:-$ROOT/.venv-lerobot}}"
PY="${PY:-python3}"

TORCH_PINS=(torch==2.14.1 torchvision==0.29.1)
LEROBOT_PIN=lerobot==0.4.4
# What `from lerobot.policies.act.modeling_act import ACTPolicy` (and lerobot's package
# __init__s on that path) import, plus ONNX export/runtime; transformers, tokenizers and
# num2words are lerobot's `smolvla` extra (SmolVLM, its processor), for examples/lerobot_flow.py.
LEROBOT_DEPS=(
  draccus==0.10.0 einops==0.8.2 typing-inspect==0.9.0 mergedeep==1.3.4
  huggingface-hub==0.35.3 safetensors==0.8.0 datasets==4.8.5 accelerate==1.15.0
  imageio==2.38.2 diffusers==0.35.2 pyserial==3.5 deepdiff==8.6.2 av==15.1.0
  packaging==25.0 termcolor==3.3.0 jsonlines==4.0.0
  onnx==1.23.2 onnxscript==0.7.2 onnxruntime==1.32.0 numpy==2.4.6 pytest==9.2.0 pytest-timeout==2.4.0
  transformers==4.57.6 tokenizers==0.22.2 num2words==0.5.14
)
# What examples.conveyor_sorting (collect / evaluate) and rtinfer's import path need
# (the same versions as the main .venv).
CELL_DEPS=(
  mujoco==4.0.0 gymnasium==1.4.0 rich==15.0.0 PyYAML==6.0.4 msgpack==1.2.4 pyzmq==27.3.0
  hdrhistogram==0.10.8
)
# These pins sit inside lerobot 0.4.4's declared ranges, except torch/torchvision (it asks
# for torch<2.11; 2.14.1 is what lies on disk and runs its ACT fine). lerobot's other
# declared deps (wandb, rerun-sdk, opencv, pynput, cmake, torchcodec) are not on the ACT
# import path and are left out; pip's resolver warns about them, which is expected.

t0=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# Never a CUDA torch from the registry: torch and torchvision themselves must come from this
# machine's disk (a file:// index or find-links), or nothing is installed. (Their small
# dependencies, e.g. cuda-bindings or pillow, may come from the registry.)
"${PIP[@]}" --dry-run --ignore-installed --report "$VENV/.torch-plan.json" "${TORCH_PINS[@]}"
"$VENV/bin/python" - "$VENV/.torch-plan.json" <<'PY'
import json, sys
plan = {i["metadata"]["name"].lower(): i["download_info"]["url"]
        for i in json.load(open(sys.argv[1]))["install"]}
remote = {n: u for n, u in plan.items() if n in ("torch", "torchvision") and not u.startswith("file:")}
if remote:
    sys.exit(f"lerobot-env: {', '.join(remote)} would be downloaded from the registry "
             f"({next(iter(remote.values()))}): refusing to fetch a CUDA build; run where "
             f"torch 2.14.1 and torchvision 0.29.1 lie on local disk")
PY
"${PIP[@]}" "${TORCH_PINS[@]}"
"${PIP[@]}" --no-deps "$LEROBOT_PIN"
# torch is already satisfied, so nothing here may replace it; the constraint keeps it so.
echo "torch==2.14.1" > "$VENV/.torch-constraint.txt"
echo "torchvision==0.29.1" >> "$VENV/.torch-constraint.txt"
"${PIP[@]}" -c "$VENV/.torch-constraint.txt" "${LEROBOT_DEPS[@]}" "${CELL_DEPS[@]}"
"${PIP[@]}" --no-deps -e "$ROOT"
"$VENV/bin/python" "$ROOT/scripts/checkout_pth.py" >/dev/null  # examples, peers: checkout only
"$VENV/bin/python" - <<'PY'
import torch, lerobot, onnxruntime, mujoco
from lerobot.policies.act.modeling_act import ACTPolicy  # noqa: F401
from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy  # noqa: F401
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy  # noqa: F401
import examples.conveyor_sorting.evaluate  # noqa: F401
from importlib.metadata import version
print("lerobot-env ok: lerobot", version("lerobot"), "torch", torch.__version__,
      "onnxruntime", onnxruntime.__version__, "mujoco", mujoco.__version__)
PY
touch "$VENV/.installed-lerobot"
echo "lerobot-env: $VENV built in $(( $(date +%s) - t0 )) s"
