"""The launch files that ship with rtinfer: ``rtinfer/cli/launch/`` (a link to the
repository's ``launch/``, shipped as package data), found from the installed package (not the
working directory), so ``rtinfer demo`` works from any directory, editable install or wheel.
The model zoo is found the same way: rtinfer.model.zoo."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def launch_file(name: str) -> Path:
    """The shipped launch file `name` (e.g. "conveyor_sorting.yaml"), an absolute path."""
    return Path(str(files("rtinfer.cli") / "launch" / name)).resolve()
