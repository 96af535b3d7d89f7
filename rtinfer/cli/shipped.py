"""Files that ship with rtinfer, found from the installed packages (not the working directory).

- the launch files: ``rtinfer/cli/launch/`` (a link to the repository's ``launch/``, shipped
  as package data), so ``rtinfer demo`` works from any directory, editable install or wheel;
- the model zoo: ``models/zoo/`` beside the ``rtinfer`` package (both are installed side by
  side, or both live in the checkout).
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import rtinfer

DEFAULT_MODEL = "conveyor-v1"


def launch_file(name: str) -> Path:
    """The shipped launch file `name` (e.g. "conveyor_sorting.yaml"), an absolute path."""
    return Path(str(files("rtinfer.cli") / "launch" / name)).resolve()


def zoo_model(name: str = DEFAULT_MODEL) -> Path:
    """The shipped model directory models/zoo/`name`, an absolute path (may not exist)."""
    return (Path(rtinfer.__file__).resolve().parent.parent / "models" / "zoo" / name)
