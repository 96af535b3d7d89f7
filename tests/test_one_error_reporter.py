"""One error reporter: outside the `rtinfer` command's own output (rtinfer/cli), every line
for stderr goes through rtinfer.realtime.complaints (`say` once, `Complaints` from a loop),
read from the source: a bare `print(..., file=sys.stderr)` or `sys.stderr.write(...)`
anywhere else fails here, naming the file and the line and what to use instead."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from rtinfer.realtime.complaints import Complaints, say

ROOT = Path(__file__).resolve().parents[1]
TREES = ("rtinfer", "controllers", "models", "examples", "peers", "rtinfer_ros2", "scripts")
ALLOWED = (
    "rtinfer/cli/",  # the command's own user output
    "rtinfer/realtime/complaints.py",
)  # the one home


def _is_stderr(node: ast.AST) -> bool:
    """sys.stderr, sys.__stderr__, or a bare `stderr` (from sys import stderr)."""
    if isinstance(node, ast.Attribute):
        return (
            node.attr in ("stderr", "__stderr__")
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )
    return isinstance(node, ast.Name) and node.id == "stderr"


def bare_stderr_lines(source: str, filename: str = "<source>") -> list[int]:
    """The lines of `source` that write to stderr themselves: print(..., file=<stderr>) or
    <stderr>.write(...)."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (
            isinstance(f, ast.Name)
            and f.id == "print"
            and any(k.arg == "file" and _is_stderr(k.value) for k in node.keywords)
        ):
            out.append(node.lineno)
        elif isinstance(f, ast.Attribute) and f.attr == "write" and _is_stderr(f.value):
            out.append(node.lineno)
    return out


def found() -> dict[str, list[int]]:
    out = {}
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED):
                continue
            lines = bare_stderr_lines(path.read_text(), rel)
            if lines:
                out[rel] = lines
    return out


def test_no_bare_stderr_print_outside_the_cli_and_the_reporter():
    over = {rel: lines for rel, lines in found().items() if lines}
    assert not over, (
        "write stderr lines through rtinfer.realtime.complaints: say(name, "
        "message) for a line said once, Complaints(name).say(kind, message) "
        "from a loop; bare stderr writes at "
        + ", ".join(f"{rel}:{ln}" for rel, lines in over.items() for ln in lines)
    )


def test_the_rule_sees_each_way_of_writing_to_stderr():
    src = (
        "import sys\nfrom sys import stderr\nprint('a', file=sys.stderr)\n"
        "print('b', file=stderr, flush=True)\nsys.stderr.write('c')\nsys.__stderr__.write('d')\n"
        "print('e')\nprint('f', file=sys.stdout)\nlog.write('g')\n"
    )
    assert bare_stderr_lines(src) == [3, 4, 5, 6]


def test_say_writes_the_lines_the_old_prints_did():
    out = io.StringIO()
    say("robot", "no action chunk was accepted", stream=out)
    say("launch", "x.yaml:3: bad key", error=False, stream=out)
    say(None, "report r.json not written: disk full", stream=out)
    assert out.getvalue().splitlines() == [
        "robot: error: no action chunk was accepted",
        "launch: x.yaml:3: bad key",
        "report r.json not written: disk full",
    ]


def test_complaints_say_through_the_same_reporter():
    out = io.StringIO()
    c = Complaints("policy", stream=out)
    c.say("obs", "an observation of another spec")
    c.say("obs", "an observation of another spec")  # within the second: counted, not said
    c.say("fits", "load fits again", error=False)
    assert out.getvalue().splitlines() == [
        "policy: error: an observation of another spec",
        "policy: load fits again",
    ]
