"""Shared switches and small helpers for the fault and fuzz tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("RTINFER_LONG") == "1"
PY = sys.executable


def trials(short: int, long: int) -> int:
    return long if LONG else short


def wait_for(cond, timeout: float = 30.0, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


def node_pids(launch_log: Path) -> dict[str, list[int]]:
    """{node: [pid, ...]} in start order, from the launcher's 'started NAME pid N' lines."""
    out: dict[str, list[int]] = {}
    text = launch_log.read_text() if launch_log.exists() else ""
    for name, pid in re.findall(r"started '([^']+)' pid (\d+)", text):
        out.setdefault(name, []).append(int(pid))
    return out


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> int | None:
    """SIGTERM, wait, then SIGKILL a process this test started; returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def hogs(n: int, seconds: float) -> list[subprocess.Popen]:
    """n busy-looping processes that end by themselves after `seconds`."""
    code = f"import time\nend=time.monotonic()+{seconds}\nwhile time.monotonic()<end: pass"
    return [subprocess.Popen([PY, "-c", code]) for _ in range(n)]


def percentile(xs, q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")
