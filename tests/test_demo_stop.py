"""Stopping `rtinfer demo`, as an operator does: Ctrl-C to the process group, SIGTERM to the
demo's own PID (systemd, `timeout`, an IDE), SIGKILL. Real processes; afterwards nothing
that the demo started may be left running, and the nodes' reports must be written."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _left_running(marker: str) -> list[str]:
    """Processes whose command line names `marker` (every process the demo starts does)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")
            )
        except (OSError, StopIteration):
            continue
        if marker in cmd and "Z" not in state.split()[1]:
            out.append(f"{d.name}: {cmd[:160]}")
    return out


def _wait_gone(marker: str, bound_s: float = 30.0) -> list[str]:
    end = time.monotonic() + bound_s
    while (left := _left_running(marker)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """The demo with the expert (quick to start), from a directory that is not the repo,
    in its own session (its own process group, as a shell gives a foreground job)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "demo",
            "--policy",
            "expert",
            "--seconds",
            "120",
            "--json",
            "--run-dir",
            str(run_dir),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    trace = run_dir / "nominal" / "controller.trace"
    end = time.monotonic() + 60
    while not (trace.exists() and trace.stat().st_size > 0) and time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    assert trace.exists(), "the loop never started"
    time.sleep(1.0)  # a second of closed loop, so there is something to report
    return proc, run_dir / "nominal"


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
@pytest.mark.parametrize(
    "sig, to_group",
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["sigint-to-group", "sigterm-to-pid"],
)
def test_signal_stops_every_node_in_order_with_reports_and_exit_128_plus_signal(
    tmp_path, sig, to_group
):
    proc, rd = _start(tmp_path)
    try:
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = err.decode()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert _wait_gone(str(rd)) == []
    report = json.loads(out)  # stdout is the partial report and nothing else
    assert report["stopped_by"] == sig.name and report["cycles"] > 0
    # every node with a report wrote it; none was SIGKILLed; in reverse start order: the
    # policy first (the robot holds), then the robot, then the monitor, which saw it all
    assert (rd / "sim_report.json").exists() and (rd / "monitor_report.json").exists()
    summary = json.loads((rd / "launch_summary.json").read_text())
    assert summary["reason"] == f"received {sig.name}"
    assert all(n["last_exit"] != -signal.SIGKILL for n in summary["nodes"].values()), summary
    stopped = [
        ln.split("'")[1]
        for ln in (rd / "console.log").read_text().splitlines()
        if ln.startswith("[launch] stopped '")
    ]
    assert stopped == ["policy", "sim", "monitor"]
    sim = json.loads((rd / "sim_report.json").read_text())
    assert summary["nodes"]["sim"]["last_exit"] == 0  # the robot loop ended on its own terms
    assert sim["controller"]["rejected_stale"] == 0  # never applied a stale command
    for log in rd.glob("*.log"):
        assert "Traceback" not in log.read_text(), log


@pytest.mark.slow
def test_sigkill_of_the_demo_leaves_nothing_running_and_the_nodes_still_report(tmp_path):
    proc, rd = _start(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        # PR_SET_PDEATHSIG: the launcher gets SIGTERM and stops its nodes in order
        left = _wait_gone(str(rd))
    finally:
        for line in _left_running(str(rd)):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert left == []
    summary = json.loads((rd / "launch_summary.json").read_text())
    assert summary["reason"] == "received SIGTERM", summary  # the launcher's orderly stop
    # The dying demo's threads each deliver the launcher a PDEATHSIG SIGTERM, milliseconds
    # apart: one stop, not "a second signal, kill now". Every node stops on SIGTERM, in order,
    # and writes its report.
    assert all(n["last_exit"] == 0 for n in summary["nodes"].values()), summary
    assert (rd / "sim_report.json").exists() and (rd / "monitor_report.json").exists()
