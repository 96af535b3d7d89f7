"""The shipped model zoo: models/zoo/ beside the rtinfer package (both are installed side
by side, or both live in the checkout), found from the installed package, not the working
directory, so every command finds it from any directory."""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL = "conveyor-v1"


def zoo_model(name: str = DEFAULT_MODEL) -> Path:
    """The shipped model directory models/zoo/`name`, an absolute path (may not exist)."""
    return Path(__file__).resolve().parents[2] / "models" / "zoo" / name
