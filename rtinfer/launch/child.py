"""The first code a launched node runs: die with the launcher, pin, then call the entry point.

    python -m rtinfer.launch.child --name NAME [--cpus 3,4] [--priority 10] [--parent PID] \
        -- module:function ARG...

Order: (1) ask the kernel to send SIGTERM when the launcher dies (Linux prctl
PR_SET_PDEATHSIG), so a SIGKILLed launcher leaves no node behind; (2) CPU affinity and
SCHED_FIFO priority via `rtinfer.realtime.os_setup.configure_realtime` (best effort: a refusal is
printed, the node still runs; GC and mlockall are left to the node); (3) import the module
and call ``function(argv_list)``; its return value (int or None) is the exit status.
A missing module or function exits 127 with a message saying which.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

from rtinfer.launch.entry import EntryError, resolve
from rtinfer.realtime.complaints import say

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int | None) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the launcher's process-group kill still applies
    if parent is not None and os.getppid() != parent:
        sys.exit(0)  # the launcher died before prctl took effect


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rtinfer.launch.child")
    p.add_argument("--name", default="node")
    p.add_argument("--cpus", default=None, help="comma-separated CPU numbers")
    p.add_argument("--priority", type=int, default=None, help="SCHED_FIFO priority")
    p.add_argument("--parent", type=int, default=None, help="the launcher's pid")
    p.add_argument("entry", help="module:function")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    _die_with_parent(a.parent)
    if a.cpus is not None or a.priority is not None:
        from rtinfer.realtime.os_setup import configure_realtime

        cpus = None if a.cpus is None else [int(c) for c in a.cpus.split(",")]
        steps = configure_realtime(cpus, a.priority, lock_memory=False, freeze_gc=False)
        wanted = {k: v for k, v in steps.items() if k in ("affinity", "scheduler")}
        print(
            f"launch_child {a.name}: " + ", ".join(f"{k} {v}" for k, v in wanted.items()),
            flush=True,
        )
    try:
        func = resolve(a.entry)  # a module whose own imports fail shows its traceback
    except EntryError as e:
        say(f"launch_child {a.name}", str(e), error=False)
        return 127
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    sys.argv = [a.entry, *args]
    result = func(list(args))
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
