"""Launching `rtinfer demo`'s runs: the launcher as a child process that dies with the demo,
busy processes beside it, the live dashboard while it runs, and the signal forwarding (Stop)
that lets Ctrl-C or SIGTERM end a run in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from rtinfer.cli.demo_report import collect_report, read_json
from rtinfer.cli.pressure import audit, hold_intervals
from rtinfer.cli.stress import late_fraction, percent_text, pin_tasks, sorted_text
from rtinfer.launch.file import load
from rtinfer.monitor.dashboard import Dashboard

SUPERVISOR = "rtinfer.launch.supervisor:main"
_PR_SET_PDEATHSIG = 1


class Stop:
    """SIGINT/SIGTERM: remember the first, forward each to the launcher (if running)."""

    def __init__(self):
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None

    def __call__(self, signum) -> None:
        self.signum = self.signum or signum
        self.forward(signum)

    def forward(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass


def busy_processes(
    n: int, seconds: float, cpu: int | None = None, idle: bool = False
) -> list[subprocess.Popen]:
    """n busy-looping processes (pinned to `cpu` and under SCHED_IDLE when asked) that end by
    themselves after `seconds`, or when the demo dies (PR_SET_PDEATHSIG SIGKILL); each in its
    own session, so Ctrl-C does not reach it."""
    pin = "" if cpu is None else f"os.sched_setaffinity(0, {{{cpu}}})\n"
    sched = "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n" if idle else ""
    code = (
        f"import ctypes, os, time\nctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, 9, 0, 0, 0)\n"
        f"if os.getppid() != {os.getpid()}: raise SystemExit\n{pin}{sched}"
        f"end = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    )
    return [
        subprocess.Popen(
            [sys.executable, "-c", code], start_new_session=True, stdin=subprocess.DEVNULL
        )
        for _ in range(n)
    ]


def launcher_command(
    launch: Path, run_dir: Path, seconds: float, overrides: dict, record: str | None = None
) -> list[str]:
    """The launcher, started through rtinfer.launch.child so that it gets PR_SET_PDEATHSIG
    (SIGTERM: an orderly stop of its nodes) when the demo dies; record: its --record."""
    sets = [f"--set={k}={v}" for k, v in {**overrides, "seconds": seconds}.items()]
    rec = [] if record is None else ["--record", record]
    return [
        sys.executable,
        "-m",
        "rtinfer.launch.child",
        "--name",
        "launcher",
        "--parent",
        str(os.getpid()),
        "--",
        SUPERVISOR,
        str(launch),
        "--run-dir",
        str(run_dir),
        "--seconds",
        str(seconds + 60),
        *rec,
        *sets,
    ]


def run_once(
    launch: Path,
    seconds: float,
    run_dir: Path,
    overrides: dict,
    console: Console,
    title: str,
    stop: Stop,
    stress: int = 0,
    pin_cpu: int | None = None,
    record: str | None = None,
) -> dict:
    """One launched run; `stress` busy processes beside it; pin_cpu: the policy node's main
    thread (its compute) and those processes (SCHED_IDLE) pinned to that CPU, its other
    threads and the launcher, sim and monitor kept off it (the node re-pinned each second, so
    a thread it starts later is placed too)."""
    spec = load(launch, overrides)
    endpoints = [e.address(run_dir) for e in spec.endpoints.values()]
    cmd = launcher_command(launch, run_dir, seconds, overrides, record)
    mine = os.sched_getaffinity(0)
    if pin_cpu is not None and len(mine - {pin_cpu}) > 0:
        os.sched_setaffinity(0, mine - {pin_cpu})  # the launcher, sim and monitor inherit it
    with open(run_dir / "console.log", "w") as log:
        # Its own session: a terminal's Ctrl-C reaches the demo only, which forwards it once.
        stop.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    if stop.signum is not None:  # a signal came before the launcher existed
        stop.forward(stop.signum)
    proc = stop.proc
    hogs = (
        busy_processes(stress, seconds + 30, pin_cpu, idle=pin_cpu is not None)
        if stress and stop.signum is None
        else []
    )
    dash = Dashboard(endpoints, title)
    next_pin = 0.0
    try:
        with Live(dash.render(), console=console, refresh_per_second=4) as live:
            while proc.poll() is None:
                if pin_cpu is not None and time.monotonic() >= next_pin:
                    pinned = pin_tasks(proc.pid, "rtinfer.inference.node", pin_cpu)
                    next_pin = time.monotonic() + (1.0 if pinned else 0.1)
                dash.poll(100)
                live.update(dash.render())
            dash.poll(0)  # what the nodes sent as they stopped
            live.update(dash.render())
        if not console.is_terminal:
            console.line()  # a log file gets the table's last line ended (no "┘{")
    finally:
        os.sched_setaffinity(0, mine)
        for h in hogs:
            h.kill()
            h.wait()
        if proc.poll() is None:  # only on an error in this loop: an orderly stop first
            proc.terminate()
        proc.wait()
        dash.close()
    report = collect_report(
        run_dir, dash.latest, proc.returncode, robots=int(overrides.get("robots", 0))
    )
    if stop.signum is not None:
        report["stopped_by"] = signal.Signals(stop.signum).name
    return report


def one_run(
    launch: Path,
    base: Path,
    name: str,
    seconds: float,
    overrides: dict,
    console: Console,
    stop: Stop,
    png: str | None,
    single: bool,
    hogs: int = 0,
    cpu: int | None = None,
    deadline_ms: float | None = None,
    record: str | None = None,
) -> dict:
    """One named run in base/name, its errors on the console; deadline_ms: audit its traces
    against it (rtinfer.cli.pressure.audit) and say how late it was."""
    rd = base / name
    rd.mkdir(parents=True, exist_ok=True)
    r = run_once(
        launch,
        seconds,
        rd,
        overrides,
        console,
        f"rtinfer demo: {name}",
        stop,
        stress=hogs,
        pin_cpu=cpu,
        record=record,
    )
    if record is not None:
        r["recording"] = record
    for line in r.get("error", []):
        console.print(f"[red]error[/red] {name}: {line}", highlight=False, soft_wrap=True)
    if deadline_ms is not None:
        r["late_fraction"] = late_fraction(r)
        r["audit"] = audit_run(rd, deadline_ms)
        console.print(
            f"{name}: {percent_text(r['late_fraction'])} of {r['cycles']} cycles late, "
            f"sorted {sorted_text(r)}",
            highlight=False,
        )
    trace = rd / "controller.trace"
    if png and trace.exists() and stop.signum is None:
        from rtinfer.monitor.report import main as report_main

        report_main(
            str(trace),
            png=png if single else str(Path(png).with_name(f"{Path(png).stem}-{name}.png")),
        )
    return r


def audit_run(run_dir: Path, deadline_ms: float) -> dict | None:
    """The run's traces audited against deadline_ms (rtinfer.cli.pressure.audit); None
    without readable traces."""
    from rtinfer.realtime.trace import read_trace

    holds = hold_intervals(read_json(run_dir / "monitor_report.json"))
    try:
        return audit(
            read_trace(run_dir / "policy.trace"),
            read_trace(run_dir / "controller.trace"),
            deadline_ms,
            holds,
        )
    except (OSError, ValueError):
        return None
