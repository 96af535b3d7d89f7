"""Node entry points for the launcher tests: each is `function(argv) -> int | None`.

They record what the launcher must be able to check from outside: pid files (so a test
can prove a process is gone), start counts (restarts) and the argv they received.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _append(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text + "\n")


def forever(argv: list[str]) -> int:
    """argv: [pidfile]. Prints, records its pid, sleeps until signalled (SIGTERM kills it)."""
    _append(argv[0], str(os.getpid()))
    print(f"forever: running as {os.getpid()}", flush=True)
    while True:
        time.sleep(0.1)


def ignore_term(argv: list[str]) -> int:
    """argv: [pidfile]. Ignores SIGTERM, so only SIGKILL after the grace period stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return forever(argv)


def spawn_grandchild(argv: list[str]) -> int:
    """argv: [pidfile, ("exit")]. Starts a grandchild that ignores SIGTERM; records both
    pids; then sleeps until signalled, or with "exit" returns 5 at once (orphaning it)."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", code])
    _append(argv[0], f"{os.getpid()} {child.pid}")
    if argv[1:] == ["exit"]:
        return 5
    while True:
        time.sleep(0.1)


def crash_after(argv: list[str]) -> int:
    """argv: [startsfile, seconds, exit_code]. Records a start, sleeps, exits with the code."""
    _append(argv[0], str(time.monotonic()))
    time.sleep(float(argv[1]))
    print(f"crash_after: exiting with {argv[2]}", flush=True)
    return int(argv[2])


def echo_args(argv: list[str]) -> int:
    """argv: [outfile, ...]. Writes its argv and CPU affinity as JSON, then exits 0."""
    info = {"argv": argv, "cpus": sorted(os.sched_getaffinity(0))}
    Path(argv[0]).write_text(json.dumps(info))
    return 0


NOT_CALLABLE = 42  # a top-level name that is not a function


def bind_forever(argv: list[str]) -> int:
    """argv: [pidfile, endpoint]. Binds a ZeroMQ PUB there, then records its pid and sleeps.
    SIGTERM kills it at once (the default action), so its ipc socket file is left behind,
    as after a SIGKILL."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.bind(argv[1])
    _append(argv[0], str(os.getpid()))
    while True:
        time.sleep(0.1)


def _load_config(key: str) -> None:
    raise ValueError(f"bad config key {key!r}")


def raise_error(argv: list[str]) -> int:
    """argv: [startsfile]. Records a start, then dies of a ValueError with a traceback."""
    _append(argv[0], str(time.monotonic()))
    print("raise_error: reading the config", flush=True)
    _load_config("windw")
    return 0


def fail_once(argv: list[str]) -> int:
    """argv: [startsfile]. The first start exits 4; later starts run until signalled."""
    _append(argv[0], str(time.monotonic()))
    if len(Path(argv[0]).read_text().split()) == 1:
        return 4
    while True:
        time.sleep(0.1)


def print_report(argv: list[str]) -> int:
    """argv: [reportfile]. Prints a 42-line JSON report (as the sim does), writes it, exits 0."""
    text = json.dumps({f"figure_{i}": i for i in range(40)}, indent=1)
    Path(argv[0]).write_text(text)
    print(text, flush=True)
    return 0
