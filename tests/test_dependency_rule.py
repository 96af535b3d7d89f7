"""The robot side stays light: importing it must not pull in heavy inference packages."""

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "onnxruntime", "tensorrt", "mujoco", "rich")
# every module of the robot-safe packages (docs/architecture.md), and the controllers
LIGHT = tuple(
    sorted(
        f"{pkg}.{p.stem}" if p.stem != "__init__" else pkg
        for pkg in ("rtinfer.transport", "rtinfer.realtime", "rtinfer.model", "controllers")
        for p in (Path(__file__).resolve().parents[1] / pkg.replace(".", "/")).glob("*.py")
    )
)


def test_light_core_imports_no_heavy_package():
    code = (
        "import importlib, json, sys\n"
        f"for m in {LIGHT!r}: importlib.import_module(m)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_cli_version_imports_no_heavy_package():
    code = (
        "import json, sys\n"
        "from rtinfer.cli import build_parser\n"
        "build_parser()\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
