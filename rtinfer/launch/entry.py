"""Names that point into packages, the one place they are resolved: ``module:attribute`` (an
entry point, a hardware class: how launch files and the CLI reach code above rtinfer, the example
cells, the model packager, the peer benchmarks, without importing it) and ``package:file`` (a file
shipped inside an importable package, e.g. examples.conveyor_sorting:robot.yaml, so a launch file
works from any directory).
"""

from __future__ import annotations

import importlib
import importlib.resources
from collections.abc import Callable
from pathlib import Path

# Entry modules of rtinfer 0.1, before the package was split into subpackages: a launch file
# that still names one gets "moved to ..." with the new path, at check time and at start.
MOVED = {
    "rtinfer.node": "rtinfer.inference.node",
    "rtinfer.monitor": "rtinfer.monitor.node",
    "rtinfer.launch": "rtinfer.launch.supervisor",
    "rtinfer.launch_child": "rtinfer.launch.child",
    "rtinfer.report": "rtinfer.monitor.report",
    "rtinfer.demo": "rtinfer.cli.demo",
    "rtinfer.soak": "rtinfer.cli.soak",
    "rtinfer.engine": "rtinfer.inference.backends.tensorrt_build",
}


def moved(entry: str) -> str | None:
    """'rtinfer.node:main' -> "moved to 'rtinfer.inference.node:main'"; None if not moved."""
    module, _, func = entry.partition(":")
    new = MOVED.get(module)
    return None if new is None else f"{module!r} moved to {new!r}: write {new}:{func or 'main'}"


class EntryError(LookupError):
    """The module or the function of an entry point is missing; the message says which."""


def resolve(entry: str) -> Callable:
    """'package.module:function' -> the function (or class: anything callable). Raises
    EntryError when the text has no ':', the module does not exist or the name is not there.
    A module that exists but fails inside its own imports raises that error unchanged (its
    traceback is the fix)."""
    module_name, sep, func_name = entry.partition(":")
    if not sep or not module_name or not func_name:
        raise EntryError(f"{entry!r} is not module:function")
    if moved(entry):
        raise EntryError(moved(entry))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise EntryError(f"no module {module_name!r}") from None
        raise
    func = getattr(module, func_name, None)
    if not callable(func):
        raise EntryError(f"{module_name!r} has no function {func_name!r}")
    return func


def package_file(ref: str) -> Path:
    """A file path as it is, or PACKAGE:NAME for the file NAME inside importable PACKAGE
    (examples.conveyor_sorting:robot.yaml); a PACKAGE that cannot be imported leaves the text
    as a path, so the caller's "no such file" names what was given."""
    p = Path(ref)
    package, sep, name = ref.partition(":")
    if p.exists() or not sep or "/" in package:
        return p
    try:
        return Path(str(importlib.resources.files(package) / name))
    except ModuleNotFoundError:
        return p
