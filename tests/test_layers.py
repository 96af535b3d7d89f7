"""The import graph, read from the source: no cycles, and no import against the layer order.

Every import counts, those inside functions too (a lazy import is for a heavy optional
package, never for a layering problem). docs/architecture.md documents the order:

    peers, examples  ->  rtinfer_ros2  ->  models, controllers  ->  rtinfer.cli
    -> rtinfer.bench, rtinfer.record -> rtinfer.inference, rtinfer.monitor, rtinfer.launch
    -> rtinfer.model
    -> rtinfer.transport, rtinfer.realtime -> rtinfer (the package face)

An import may point down the order or stay inside its own unit (one rtinfer subpackage, or
one top-level package); units of the same rank never import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rtinfer", "controllers", "models", "examples", "peers", "rtinfer_ros2")

RANK = {
    "rtinfer": 0,
    "rtinfer.transport": 1,
    "rtinfer.realtime": 1,
    "rtinfer.model": 2,
    "rtinfer.inference": 3,
    "rtinfer.monitor": 3,
    "rtinfer.launch": 3,
    "rtinfer.bench": 4,
    "rtinfer.record": 4,
    "rtinfer.fleet": 4,  # the fleet control plane on Ray: starts nodes by module name
    "rtinfer.cli": 5,
    "models": 10,
    "controllers": 10,
    "rtinfer_ros2": 15,  # the ROS 2 bridge: a robot driver (controllers) on rclpy
    "examples": 20,
    "peers": 20,
}

# The two documented exceptions (docs/architecture.md), upward on purpose:
# (importing module or package, imported unit).
ALLOWED_UP = (
    ("rtinfer.inference.backends.torch_backend", "models"),  # runs the checkpoint's architecture
    ("rtinfer.bench", "models"),  # `rtinfer bench backend` builds models to measure
)


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Project modules that `name` imports anywhere in its source."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "rtinfer" and len(parts) > 1 else parts[0]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def test_every_unit_has_a_rank():
    assert sorted({unit(m) for m in modules()} - set(RANK)) == []


def test_no_import_goes_against_the_layer_order():
    wrong = []
    for src, targets in graph().items():
        for dst in targets:
            a, b = unit(src), unit(dst)
            if a == b or RANK[b] < RANK[a]:
                continue
            if any(b == up and (src == s or src.startswith(s + ".")) for s, up in ALLOWED_UP):
                continue
            wrong.append(f"{src} -> {dst} ({a} rank {RANK[a]} -> {b} rank {RANK[b]})")
    assert wrong == []


def test_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n) :] + [n]))
            elif n not in state:
                visit(n, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [])
    assert cycles == []


def test_the_graph_sees_lazy_imports(tmp_path):
    # the checker itself: an import inside a function is an edge like any other
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from rtinfer.transport import wire\n")
    known = {"rtinfer.transport.wire": src, "rtinfer.transport": src, "m": src}
    assert imports("m", src, known) == {"rtinfer.transport.wire", "rtinfer.transport"}
