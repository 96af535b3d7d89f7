"""The documents name only modules that exist: every dotted path of the project's packages in
README.md, docs/*.md and the sources' docstrings and comments imports (or names an
attribute of a module that does), and every source path (`rtinfer/.../x.py`) in the docs is
a file of the checkout."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "benchmarks").glob("*.md")),
]
PACKAGES = ("rtinfer", "controllers", "models", "examples", "peers")
DOTTED = re.compile(r"(?<![\w./-])((?:{})(?:\.[A-Za-z_]\w*)+)".format("|".join(PACKAGES)))
FILE = re.compile(r"(?<![\w./-])((?:{})/[\w/.-]*\w)".format("|".join(PACKAGES)))


def resolves(dotted: str) -> bool:
    """True if `dotted` is a module, or an attribute chain under one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def exists(path: str) -> bool:
    """A file or folder of the checkout, or a checkpoint named without its extension
    (`models/zoo/conveyor-v1/policy` for policy.safetensors + policy.json)."""
    p = ROOT / path
    return p.exists() or any(p.parent.glob(p.name + ".*"))


def names(doc: Path, rx: re.Pattern) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        out += [(n, m.group(1).rstrip(".")) for m in rx.finditer(line)]
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_dotted_module_path_in_the_docs_imports(doc):
    bad = [
        f"{doc.name}:{n}: {d}"
        for n, d in names(doc, DOTTED)
        if not d.endswith((".py", ".md", ".yaml", ".json")) and not resolves(d)
    ]
    assert bad == []


# names that look like paths and are not: the ROS 2 bridge's DiagnosticStatus names
NOT_PATHS = {"rtinfer/cycles", "rtinfer/bridge"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_source_path_in_the_docs_exists(doc):
    bad = [
        f"{doc.name}:{n}: {p}"
        for n, p in names(doc, FILE)
        if not exists(p) and not any(ch in p for ch in "*{") and p not in NOT_PATHS
    ]
    assert bad == []


# the table of entry modules of the old flat layout names them on purpose ("moved to ...")
OLD_NAMES = ROOT / "rtinfer" / "launch" / "entry.py"
SOURCES = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if p != OLD_NAMES]


def test_every_dotted_module_path_in_the_sources_imports():
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {d}"
        for p in SOURCES
        for n, d in names(p, DOTTED)
        if not d.endswith((".py", ".md", ".yaml", ".json", ".npz")) and not resolves(d)
    ]
    assert bad == []


def test_the_checker_catches_a_module_that_does_not_exist():
    assert resolves("rtinfer.transport.wire.encode") and resolves("controllers.node")
    assert not resolves("rtinfer.node") and not resolves("rtinfer.transport.wire.nothing")
