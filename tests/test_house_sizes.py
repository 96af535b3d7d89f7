"""The house's limits, read from the source: no class in rtinfer/, controllers/ or
rtinfer_ros2/ holds more than 20 fields or spans more than 300 lines, and the two loops and
the subscriber stay composed of parts (InferenceNode <= 12 fields, ControllerNode <= 16,
Subscriber <= 16). A class that grows past them gets split into parts, each owning its own
state (docs/architecture.md), not an exception here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("rtinfer", "controllers", "rtinfer_ros2")
MAX_FIELDS, MAX_LINES = 20, 300
TIGHTER = {"InferenceNode": 12, "ControllerNode": 16, "Subscriber": 16}


def fields(cls: ast.ClassDef) -> set[str]:
    """Every `self.x` assigned anywhere in the class, and its annotated class-level names
    (a dataclass's fields)."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for a in ast.walk(t):
                    if (
                        isinstance(a, ast.Attribute)
                        and isinstance(a.value, ast.Name)
                        and a.value.id == "self"
                    ):
                        names.add(a.attr)
    names.update(
        s.target.id
        for s in cls.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    )
    return names


def classes():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    yield f"{path.relative_to(ROOT)}:{node.name}", node


def test_no_class_over_the_house_limits():
    over = [
        f"{where}: {len(fields(c))} fields, {c.end_lineno - c.lineno + 1} lines"
        for where, c in classes()
        if len(fields(c)) > TIGHTER.get(c.name, MAX_FIELDS)
        or c.end_lineno - c.lineno + 1 > MAX_LINES
    ]
    assert not over, "split these into parts (docs/architecture.md): " + "; ".join(over)


def test_the_tighter_classes_are_found():
    found = {c.name for _, c in classes()}
    assert set(TIGHTER) <= found, set(TIGHTER) - found


def test_the_rule_counts_fields_as_it_says():
    src = (
        "class A:\n    x: int = 0\n    def __init__(self):\n        self.a = self.b = 1\n"
        "        self.c += 1\n        other.d = 2\n    def f(self):\n        self.e: int = 3\n"
    )
    cls = ast.parse(src).body[0]
    assert isinstance(cls, ast.ClassDef) and fields(cls) == {"x", "a", "b", "c", "e"}
