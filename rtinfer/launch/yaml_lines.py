"""YAML with line numbers, for launch-file validation: plain data plus a path -> line table.

`compose_file` parses with `yaml.compose` (safe: only plain scalars, lists and mappings;
no Python tags), rejects duplicate mapping keys, and records the 1-based line of every
value under its path, e.g. ``("nodes", 1, "entry") -> 14``. `Report` turns paths into
``FILE:LINE: where: message`` lines and raises them together as one `LaunchError`. A value
set by ``--set`` keeps the line of the key it replaced (or of its section) and its message
names the ``--set``.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import re
import sys
from pathlib import Path

import yaml
from yaml.constructor import SafeConstructor

from rtinfer.launch.entry import moved

ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class LaunchError(Exception):
    """A launch file or a launch is wrong; the message says where and what to fix."""


class Report:
    """Collects validation errors; `raise_if_any` raises them as one LaunchError."""

    def __init__(self, file: str, marks: dict[tuple, int]):
        self.file, self.marks, self.errors = file, marks, []
        self.overrides: dict[tuple, str] = {}  # path -> "KEY=VALUE" of the --set that set it

    def line(self, path: tuple) -> int:
        while path and path not in self.marks:
            path = path[:-1]
        return self.marks.get(path, 1)

    def err(self, path: tuple, msg: str) -> None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        line = self.line(path)
        by = next(
            (
                self.overrides[path[:i]]
                for i in range(len(path), 0, -1)
                if path[:i] in self.overrides
            ),
            None,
        )
        where = (where or "(top)") + (f" (--set {by})" if by else "")
        self.errors.append((line, f"{self.file}:{line}: {where}: {msg}"))

    def raise_if_any(self) -> None:
        if self.errors:
            lines = [m for _, m in sorted(self.errors, key=lambda e: e[0])]
            raise LaunchError(
                f"invalid launch file ({len(lines)} problem"
                f"{'s' if len(lines) > 1 else ''}):\n  " + "\n  ".join(lines)
            )


OVERRIDABLE = ("deadline_ms", "seconds", "run_dir", "name", "robots", "realtime")


def compose_file(path: str | Path, overrides: dict[str, str] | None = None):
    """-> (data, report): the plain data with overrides applied, and a `Report` holding the
    lines and any problems so far. Syntax errors and a non-mapping top level raise; an
    override of an unknown name (`vars.NAME`, `rates.NAME` not in the file) is a problem."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LaunchError(f"{path}: cannot read launch file: {exc.strerror}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise LaunchError(
            f"{path}:{mark.line + 1 if mark else '?'}: YAML syntax: {exc.problem or exc}"
        ) from None
    marks: dict[tuple, int] = {}
    report = Report(str(path), marks)
    data = _plain(root, (), marks, report) if root is not None else {}
    report.raise_if_any()
    if not isinstance(data, dict):
        raise LaunchError(f"{path}:1: the top level must be a mapping (endpoints:, nodes:, ...)")
    for key, text_value in (overrides or {}).items():
        parts = key.split(".")
        if not (
            len(parts) == 1
            and parts[0] in OVERRIDABLE
            or len(parts) == 2
            and parts[0] in ("vars", "rates", "monitor")
        ):
            raise LaunchError(
                f"override {key!r}: only deadline_ms, seconds, run_dir, name, "
                "robots, realtime, vars.NAME, rates.NAME and monitor.NAME can "
                "be overridden"
            )
        try:
            value = yaml.safe_load(text_value) if text_value != "" else ""
        except yaml.YAMLError:
            value = text_value  # not YAML: the text itself (a type check reports misuse)
        target = data.setdefault(parts[0], {}) if len(parts) == 2 else data
        if not isinstance(target, dict):
            raise LaunchError(f"override {key!r}: {parts[0]} is not a mapping in {path}")
        report.overrides[tuple(parts)] = f"{key}={text_value}"
        if parts[0] in ("vars", "rates") and parts[1] not in target:
            names = sorted(target)
            near = difflib.get_close_matches(parts[1], names, n=1)
            report.err(
                tuple(parts),
                f"unknown {'variable' if parts[0] == 'vars' else 'rate'} "
                f"{parts[1]!r}"
                + (f"; did you mean {parts[0]}.{near[0]}?" if near else "")
                + f" ({parts[0]}: {', '.join(names) or 'none'}; declare it under "
                f"{parts[0]}: in the file to add one)",
            )
            continue
        target[parts[-1]] = value
        marks.setdefault(tuple(parts), marks.get(tuple(parts[:-1]), 1))
    return data, report


_CONSTRUCT = SafeConstructor()


def _plain(node, path: tuple, marks: dict, report: Report, line: int | None = None):
    # a mapping entry is marked at its key's line, where a reader looks for it
    marks[path] = line or node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out, first = {}, {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                report.err(path, "mapping keys must be plain names")
                continue
            key = str(_CONSTRUCT.construct_object(k))
            if key in first:
                marks[path + (key,)] = k.start_mark.line + 1
                report.err(
                    path + (key,), f"duplicate key {key!r} (first at line {first[key]}); keep one"
                )
                continue
            first[key] = k.start_mark.line + 1
            out[key] = _plain(v, path + (key,), marks, report, first[key])
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(v, path + (i,), marks, report) for i, v in enumerate(node.value)]
    return _CONSTRUCT.construct_object(node)


TYPE_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a mapping",
    type(None): "null",
}


def is_type(value, t) -> bool:
    """YAML-minded isinstance: bools are not numbers, ints are acceptable floats."""
    ts = t if isinstance(t, tuple) else (t,)
    if isinstance(value, bool):
        return bool in ts
    return any(isinstance(value, (int, float) if x is float else x) for x in ts)


def check_fields(r: Report, data, path: tuple, spec: dict, required: tuple = ()) -> bool:
    """Unknown keys, missing required keys and wrong types of one mapping; False if not a
    mapping."""
    if not isinstance(data, dict):
        r.err(path, "expected a mapping")
        return False
    for key, value in data.items():
        if key not in spec:
            near = difflib.get_close_matches(key, spec, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"allowed: {', '.join(spec)}"
            r.err(path + (key,), f"unknown key {key!r}; {hint}")
        elif not is_type(value, spec[key]):
            ts = spec[key] if isinstance(spec[key], tuple) else (spec[key],)
            r.err(
                path + (key,),
                f"{key} must be {' or '.join(TYPE_NAMES[t] for t in ts)}, "
                f"got {type(value).__name__} {value!r}",
            )
    for key in required:
        if key not in data:
            r.err(path, f"missing required key {key!r}")
    return True


def check_entry(r: Report, path: tuple, entry: str) -> None:
    """module:function exists: module by find_spec, function by parsing its source (ast)."""
    if not ENTRY.match(entry):
        r.err(path, f"entry {entry!r} must look like package.module:function")
        return
    module, func = entry.split(":")
    if moved(entry):
        r.err(path, moved(entry))
        return
    origin, why = find_source(module)
    if why:
        r.err(
            path,
            f"module {module!r} {why}; check the spelling and that it is importable "
            f"from the launch's working directory ({os.getcwd()})",
        )
        return
    if origin is None:
        return  # no source to read; the child reports a missing function at start
    tree = ast.parse(Path(origin).read_text(), origin)
    if func not in _top_level_names(tree.body):
        r.err(
            path,
            f"module {module!r} ({origin}) has no top-level {func!r}; "
            "name a function that takes an argv list",
        )


def find_source(module: str) -> tuple[str | None, str | None]:
    """(source file or None, None) if `module` is importable by a launched node, else
    (None, why). A node runs as ``python -m rtinfer.launch.child`` in the launcher's working
    directory, so its sys.path[0] is that directory; the launcher's own sys.path[0] may be
    another (the `rtinfer` script's bin directory), so the search uses the node's path."""
    saved = sys.path[:]
    sys.path[:] = [os.getcwd(), *saved[1:]]
    try:
        spec = importlib.util.find_spec(module)
    except Exception as exc:  # a parent package failed to import: report, don't crash
        return None, f"cannot be found: {type(exc).__name__}: {exc}"
    finally:
        sys.path[:] = saved
    if spec is None:
        return None, "not found"
    return (spec.origin if spec.origin and spec.origin.endswith(".py") else None), None


def dataclass_fields(target: str) -> dict[str, str] | None:
    """'module:Class' -> {field: annotation text} read from the module's source (no import
    of the module itself); None when the source or the class cannot be found."""
    module, _, cls = target.partition(":")
    origin, why = find_source(module)
    if origin is None:
        return None
    for st in ast.parse(Path(origin).read_text(), origin).body:
        if isinstance(st, ast.ClassDef) and st.name == cls:
            return {
                s.target.id: ast.unparse(s.annotation)
                for s in st.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return None


def annotation_types(text: str) -> tuple | None:
    """'float' -> (float,), 'str | None' -> (str, NoneType), 'tuple[str, ...]' -> (list,);
    None when the annotation is not one of these simple forms (then any value passes)."""
    simple = {
        "float": float,
        "int": int,
        "str": str,
        "bool": bool,
        "None": type(None),
        "dict": dict,
        "list": list,
        "tuple": list,
    }
    out = []
    for part in text.split("|"):
        base = part.strip().split("[")[0]
        if base not in simple:
            return None
        out.append(simple[base])
    return tuple(out)


def _top_level_names(body) -> set[str]:
    names: set[str] = set()
    for st in body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(st.name)
        elif isinstance(st, ast.Assign):
            names.update(t.id for t in st.targets if isinstance(t, ast.Name))
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            names.add(st.target.id)
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in st.names)
        elif isinstance(st, (ast.If, ast.Try)):
            for part in (
                st.body,
                st.orelse,
                getattr(st, "finalbody", []),
                *[h.body for h in getattr(st, "handlers", [])],
            ):
                names |= _top_level_names(part)
    return names


def section(data: dict, key: str, t: type):
    """data[key] if it has type t (else empty; check_fields has reported it)."""
    value = data.get(key)
    return value if isinstance(value, t) else t()
