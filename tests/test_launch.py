"""The launcher with real processes: the launcher itself runs as a subprocess, its nodes
are tests/launch_fixtures.py functions, and pid files prove what is left afterwards."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 30.0  # generous: a noisy 2-core VM


def alive(pid: int) -> bool:
    """True if pid exists and is not a zombie (a reaped-later zombie is already dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(cond, timeout: float = WAIT_S) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def write(tmp_path: Path, nodes: str) -> Path:
    p = tmp_path / "launch.yaml"
    p.write_text("name: t\nendpoints:\n  obs: ipc\nnodes:\n" + textwrap.dedent(nodes))
    return p


def start(path: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.launch.supervisor",
            str(path),
            "--run-dir",
            str(run_dir),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out


FOREVER = """\
  - name: {name}
    entry: tests.launch_fixtures:{fn}
    args: ["${{run_dir}}/{name}.pid"]
    stop_grace_s: {grace}
"""


def test_sigterm_to_launcher_stops_nodes_in_reverse_order_and_exits_zero(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        FOREVER.format(name="a", fn="forever", grace=5)
        + FOREVER.format(name="b", fn="forever", grace=5),
    )
    proc = start(path, run)
    assert wait_for(lambda: pids(run / "a.pid") and pids(run / "b.pid"))
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 0, out
    assert not any(alive(p) for p in pids(run / "a.pid") + pids(run / "b.pid"))
    assert out.index("stopped 'b'") < out.index("stopped 'a'")
    assert "[a] forever: running as" in out and "forever: running as" in (run / "a.log").read_text()
    summary = json.loads((run / "launch_summary.json").read_text())
    assert summary["nodes"]["a"]["state"] == "stopped" and "SIGTERM" in summary["reason"]


def test_node_ignoring_sigterm_is_killed_after_grace(tmp_path):
    run = tmp_path / "run"
    proc = start(write(tmp_path, FOREVER.format(name="stubborn", fn="ignore_term", grace=0.5)), run)
    assert wait_for(lambda: pids(run / "stubborn.pid"))
    proc.send_signal(signal.SIGINT)
    rc, out = finish(proc)
    assert rc == 0, out
    assert "SIGKILL to its process group" in out and "killed by SIGKILL" in out
    assert not alive(pids(run / "stubborn.pid")[0])


def test_no_orphans_grandchild_dies_with_its_node(tmp_path):
    run = tmp_path / "run"
    proc = start(
        write(tmp_path, FOREVER.format(name="parent", fn="spawn_grandchild", grace=0.5)), run
    )
    assert wait_for(lambda: len(pids(run / "parent.pid")) == 2)
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 0, out
    node, grandchild = pids(run / "parent.pid")
    assert wait_for(lambda: not alive(node) and not alive(grandchild), 5.0)


def test_grandchild_left_by_an_exited_node_is_killed_at_once(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        FOREVER.format(name="bg", fn="forever", grace=5)
        + """\
  - name: leaky
    entry: tests.launch_fixtures:spawn_grandchild
    args: ["${run_dir}/leaky.pid", exit]
    required: false
""",
    )
    proc = start(path, run)
    assert wait_for(lambda: "failed for good (exit code 5" in text(run / "launch.log"))
    grandchild = pids(run / "leaky.pid")[1]
    assert wait_for(lambda: not alive(grandchild), 5.0)  # while the launch still runs
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 3, out  # a clean stop, but a node failed for good this run (issue 15 item 3)
    assert "node 'leaky' FAILED: failed (restart: never) (last exit: exit code 5" in out


def test_on_failure_restarts_with_backoff_until_the_limit(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        FOREVER.format(name="steady", fn="forever", grace=5)
        + """\
  - name: flaky
    entry: tests.launch_fixtures:crash_after
    args: ["${run_dir}/starts", 0.05, 3]
    required: false
    restart: {policy: on-failure, max_restarts: 2, backoff_s: 0.2, window_s: 60}
""",
    )
    proc = start(path, run)
    assert wait_for(lambda: "failed for good" in text(run / "launch.log"))
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    # flaky is not required: the launch carried on, and then says it failed (exit 3)
    assert rc == 3, out
    assert "node 'flaky' FAILED: exhausted its restarts (2 of 2) (last exit: exit code 3" in out
    starts = [float(x) for x in (run / "starts").read_text().split()]
    assert len(starts) == 3  # first start + max_restarts
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    # backoff doubles: 0.2 s, then 0.4 s, each after the 0.05 s run (load only adds to a gap)
    assert gaps[0] >= 0.2 + 0.05 and gaps[1] >= 0.4 + 0.05, gaps
    assert "failed (exit code 3); restart 1/2 in 0.2 s" in out
    assert "restart 2/2 in 0.4 s" in out and "failed for good (exit code 3, 2 restarts)" in out
    summary = json.loads((run / "launch_summary.json").read_text())
    assert summary["nodes"]["flaky"] == {"state": "failed", "restarts": 2, "last_exit": 3}


def test_required_node_failing_for_good_stops_the_launch_with_exit_1(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        FOREVER.format(name="other", fn="forever", grace=5)
        + """\
  - name: crucial
    entry: tests.launch_fixtures:crash_after
    args: ["${run_dir}/starts", 0.2, 7]
    restart: {policy: on-failure, max_restarts: 1, backoff_s: 0.05}
""",
    )
    rc, out = finish(start(path, run))
    assert rc == 1, out
    assert "required node 'crucial' failed for good (exit code 7, 1 restarts)" in out
    assert len((run / "starts").read_text().split()) == 2
    assert not alive(pids(run / "other.pid")[0])


def test_required_node_finishing_ends_the_launch_cleanly_with_args_and_cpus(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        FOREVER.format(name="bg", fn="forever", grace=5)
        + """\
  - name: job
    entry: tests.launch_fixtures:echo_args
    args: ["${run_dir}/echo.json", "${endpoints.obs}", --deadline-ms, "${deadline_ms}"]
    cpus: [0]
""",
    )
    rc, out = finish(start(path, run, "--set", "deadline_ms=42"))
    assert rc == 0, out
    echo = json.loads((run / "echo.json").read_text())
    assert echo["argv"] == [str(run / "echo.json"), f"ipc://{run}/obs", "--deadline-ms", "42"]
    assert echo["cpus"] == [0]
    assert "required node 'job' finished" in out


def test_launch_ends_when_every_node_has_exited(tmp_path):
    path = write(
        tmp_path,
        """\
  - name: once
    entry: tests.launch_fixtures:crash_after
    args: ["${run_dir}/starts", 0, 4]
    required: false
""",
    )
    rc, out = finish(start(path, tmp_path / "run"))
    assert rc == 1 and "every node has exited" in out


def test_invalid_file_starts_nothing_and_exits_2(tmp_path):
    run = tmp_path / "run"
    path = write(tmp_path, FOREVER.format(name="a", fn="forever", grace=5) + "    restrat: never\n")
    rc, out = finish(start(path, run))
    assert rc == 2 and f"{path}:9:" in out and "restrat" in out
    assert not run.exists()


def test_launch_child_reports_a_missing_function_with_127():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.launch.child",
            "--name",
            "x",
            "--",
            "tests.launch_fixtures:NOT_CALLABLE",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert r.returncode == 127 and "no function 'NOT_CALLABLE'" in r.stderr
