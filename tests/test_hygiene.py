"""Project-wide rules that a grep can prove: no pickle, no eval/exec, no shell with message content."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    p
    for d in ("rtinfer", "rtinfer_ros2", "controllers", "models", "examples", "scripts", "peers")
    for p in (ROOT / d).rglob("*.py")
]
THIS = Path(__file__).resolve()


# The one exception: the LeRobot peer baseline in `rtinfer bench peers` reproduces that
# project's gRPC protocol, which pickles. It is benchmark-only code outside the runtime
# package that runs its own peer server on loopback; only the peers package imports it.
PICKLE_PEER = ROOT / "peers" / "lerobot_grpc.py"


def _offenders(pattern: str, allow: tuple[Path, ...] = ()) -> list[str]:
    rx = re.compile(pattern)
    found = []
    for path in SOURCES + [p for p in (ROOT / "tests").rglob("*.py") if p.resolve() != THIS]:
        if path in allow:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if rx.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return found


def test_sources_exist():
    assert any(p.name == "wire.py" for p in SOURCES)


def test_pickle_is_never_used():
    # pyzmq's send_pyobj/recv_pyobj pickle under the hood, so they count too.
    assert (
        _offenders(
            r"^\s*(import|from)\s+(c?[Pp]ickle|dill|cloudpickle|shelve|marshal)\b"
            r"|\b(c?pickle|dill|cloudpickle|marshal)\.\w+"
            r"|(send|recv)_pyobj|allow_pickle\s*=\s*True",
            allow=(PICKLE_PEER,),
        )
        == []
    )


def test_only_the_peer_benchmark_imports_the_pickling_peer():
    users = [
        p
        for p in SOURCES
        if "lerobot_grpc" in p.read_text() and p != PICKLE_PEER and p.parent != PICKLE_PEER.parent
    ]
    assert users == []


def test_no_eval_or_exec():
    assert _offenders(r"(?<![\w.])(eval|exec)\s*\(") == []


def test_no_shell_true():
    assert _offenders(r"shell\s*=\s*True|os\.system\(|os\.popen\(") == []


# A tracker issue number ("issue 30", "issues 20, 21", "#30") means nothing to a reader of the
# docs or the code: say what it was about instead.
ISSUE = r"\b[Ii]ssues? #?\d+|\(#\d+\)"


def test_no_tracker_issue_numbers_in_the_docs_or_the_sources():
    docs = [p for p in (ROOT / "docs").rglob("*.md")] + [ROOT / "README.md"]
    rx, found = re.compile(ISSUE), []
    for path in docs + [p for p in SOURCES if "scripts" not in p.parts]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if rx.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert found == []


def test_graphs_json_is_written_only_by_the_manifest_module():
    """rtinfer.model.manifest.write_manifest is the one writer (atomic, one format)."""
    rx = re.compile(r"graphs\.json[\"']\)?\.(write_text|open)|open\([^)]*graphs\.json[^)]*[\"']w")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if rx.search(line)
    ]
    assert found == []  # tests may write broken manifests on purpose; sources may not
