"""One short run of the conveyor cell per launch file, as `rtinfer demo` runs it (the launcher
in a child process, a Dashboard on the launch's endpoints), shared by the tests that read it:
the numbers-agree and the stamp-order tests run each launch once per session."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rtinfer.launch.file import load
from rtinfer.monitor.dashboard import Dashboard
from rtinfer.realtime.trace import read_trace

REPO = Path(__file__).resolve().parent.parent
SIM_SECONDS = 5


@dataclass
class CellRun:
    run_dir: Path
    exit_code: int
    monitor: dict  # monitor_report.json
    sim: dict  # sim_report.json
    trace: list[dict]  # controller.trace
    dashboard: dict  # the dashboard's newest health per node once the launch ended
    log: str


@functools.cache
def run_cell(launch: str, overrides: tuple[tuple[str, str], ...] = ()) -> CellRun:
    """Run `launch` (relative to the repo) for SIM_SECONDS of sim; the reports it left."""
    base = Path(tempfile.mkdtemp(prefix="rtinfer-cell-"))
    atexit.register(shutil.rmtree, base, True)
    run_dir = base / "run"
    sets = {**dict(overrides), "seconds": str(SIM_SECONDS)}
    spec = load(str(REPO / launch), sets)
    endpoints = [e.address(run_dir) for e in spec.endpoints.values()]
    cmd = [
        sys.executable,
        "-m",
        "rtinfer.launch.supervisor",
        launch,
        "--run-dir",
        str(run_dir),
        "--seconds",
        str(SIM_SECONDS + 60),
        *(f"--set={k}={v}" for k, v in sets.items()),
    ]
    dash = Dashboard(endpoints)
    with open(base / "launch.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            end = time.monotonic() + SIM_SECONDS + 90
            while proc.poll() is None and time.monotonic() < end:
                dash.poll(100)
            dash.poll(0)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(30)
            dash.close()
    read = lambda name: json.loads((run_dir / name).read_text())  # noqa: E731
    text = (base / "launch.log").read_text()
    assert proc.returncode == 0, f"{launch} exited {proc.returncode}:\n{text[-3000:]}"
    return CellRun(
        run_dir,
        proc.returncode,
        read("monitor_report.json"),
        read("sim_report.json"),
        list(read_trace(run_dir / "controller.trace")),
        dict(dash.latest),
        text,
    )
