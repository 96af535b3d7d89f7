"""A run whose node crash-loops is not green (issue 15, item 3), and the console stays
short (item 9): one line per failing node with its log's path, tracebacks and printed
reports only in the node's log. Real launcher and node processes."""

from __future__ import annotations

import json
import signal
import time

import pytest

from rtinfer.launch.supervisor import RECOVERED_S
from tests.test_launch import finish, start, text, wait_for, write

ENDS = """\
  - name: job
    entry: tests.launch_fixtures:crash_after
    args: ["${{run_dir}}/job", {seconds}, 0]
"""
CRASHER = """\
  - name: cfg
    entry: tests.launch_fixtures:raise_error
    args: ["${{run_dir}}/cfg.starts"]
    required: false
    restart: {{policy: on-failure, max_restarts: {n}, backoff_s: {backoff}}}
"""


@pytest.fixture(autouse=True)
def _no_launcher_left(no_launcher_left):
    """Every launcher a test starts is stopped at teardown, even when the test fails."""


def failed_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if "FAILED" in l]


def test_node_that_exhausts_its_restarts_fails_the_run_in_one_line(tmp_path):
    run = tmp_path / "run"
    path = write(tmp_path, CRASHER.format(n=2, backoff=0.05) + ENDS.format(seconds=2))
    rc, out = finish(start(path, run))
    assert rc == 3, out
    assert len((run / "cfg.starts").read_text().split()) == 3
    [line] = failed_lines(out)
    assert line == (
        f"[launch] node 'cfg' FAILED: exhausted its restarts (2 of 2) (last exit: "
        f"exit code 1: ValueError: bad config key 'windw'); log {run / 'cfg.log'}"
    )
    assert "Traceback" not in out and "_load_config" not in out  # not on the console ...
    log = (run / "cfg.log").read_text()
    assert log.count("Traceback (most recent call last):") == 3 and "_load_config" in log
    assert (
        out.count(f"[cfg] ValueError: bad config key 'windw' (traceback in {run / 'cfg.log'})") == 3
    )
    summary = json.loads((run / "launch_summary.json").read_text())
    assert summary["exit_code"] == 3 and "exhausted" in summary["failed"]["cfg"]


def test_node_still_crash_looping_when_the_run_ends_never_became_healthy(tmp_path):
    run = tmp_path / "run"
    path = write(tmp_path, CRASHER.format(n=50, backoff=0.2) + ENDS.format(seconds=1.5))
    rc, out = finish(start(path, run))
    assert rc == 3, out
    [line] = failed_lines(out)
    assert "node 'cfg' FAILED: never became healthy (" in line
    assert "ValueError: bad config key 'windw'" in line and f"log {run / 'cfg.log'}" in line


def test_node_that_fails_once_and_recovers_leaves_a_clean_run(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        """\
  - name: shaky
    entry: tests.launch_fixtures:fail_once
    args: ["${run_dir}/starts"]
    restart: {policy: on-failure, backoff_s: 0.05}
""",
    )
    proc = start(path, run)
    assert wait_for(lambda: len(text(run / "starts").split()) == 2)
    time.sleep(RECOVERED_S + 0.5)  # back up for longer than RECOVERED_S: healthy again
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 0, out
    assert not failed_lines(out) and "failed (exit code 4); restart 1/5" in out


def test_a_printed_report_is_one_console_line_and_whole_in_the_log(tmp_path):
    run = tmp_path / "run"
    path = write(
        tmp_path,
        """\
  - name: sim
    entry: tests.launch_fixtures:print_report
    args: ["${run_dir}/sim_report.json"]
""",
    )
    rc, out = finish(start(path, run))
    assert rc == 0, out
    sim_lines = [l for l in out.splitlines() if l.startswith("[sim]")]
    assert sim_lines[-1] == f"[sim] (printed 42 lines of JSON: see {run / 'sim.log'})"
    assert '"figure_7"' not in out
    assert json.loads(text(run / "sim.log")[text(run / "sim.log").index("{") :])["figure_39"] == 39
    assert out.splitlines()[-1] == (
        f"[launch] run directory {run}: reports sim_report.json; "
        "each node's full output in NODE.log"
    )
