"""Best-effort OS real-time setup for a control loop: CPU affinity, SCHED_FIFO, GC, mlockall.

These change process-wide state. Affinity and scheduler apply to the *calling thread*
(Linux); call them from the loop thread before it starts helper threads, which inherit
them. Every step the OS refuses is said once on stderr and the loop runs on without it.

SCHED_FIFO caution: a FIFO thread is never preempted by normal tasks, so a runaway loop at
high priority can starve a small (2-core) machine, including its ssh. Use a modest priority
(`DEFAULT_RT_PRIORITY`), leave a core for the OS, and keep RateKeeper's busy-spin short.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import resource
from collections.abc import Iterator, Sequence

from rtinfer.realtime.complaints import Complaints

_say = Complaints("realtime").say

DEFAULT_RT_PRIORITY = 10  # SCHED_FIFO priority for control loops: modest on purpose
_MCL_CURRENT, _MCL_FUTURE = 1, 2  # <sys/mman.h> on Linux


_refused: set[str] = set()  # steps already said: each refusal is said once
# How to be granted a step the OS refused (docs/launch.md, "Scheduling the loop").
FIXES = {
    "scheduler": "grant it with root, CAP_SYS_NICE (setcap cap_sys_nice+ep on the python "
    "binary) or an rtprio limit (`ulimit -r 99`, or `@realtime - rtprio 99` in "
    "/etc/security/limits.conf)",
    "affinity": "name CPUs this machine has (`nproc`; a container's cpuset limits them)",
}


def _refuse(step: str, reason: str) -> str:
    if step not in _refused:
        _refused.add(step)
        fix = f"; {FIXES[step]}" if step in FIXES else ""
        _say(step, f"{step} refused: {reason} (running on without it{fix})", error=False)
    return reason


def _set_affinity(cpus: Sequence[int]) -> None:
    try:
        os.sched_setaffinity(0, list(cpus))
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot pin to cpus {list(cpus)} ({exc.strerror}); "
            f"this machine has {os.cpu_count()} cpus",
        ) from None


def _set_fifo(priority: int) -> None:
    lo, hi = os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)
    if not lo <= priority <= hi:
        raise ValueError(f"priority {priority} outside SCHED_FIFO range [{lo}, {hi}]")
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


def _lock_memory() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    # Without CAP_IPC_LOCK, MCL_FUTURE under a finite limit makes later
    # allocations fail (MemoryError mid-loop), which is worse than paging.
    if os.geteuid() != 0 and soft != resource.RLIM_INFINITY:
        raise PermissionError(
            f"RLIMIT_MEMLOCK is {soft} bytes; run `ulimit -l unlimited` or grant CAP_IPC_LOCK"
        )
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.mlockall(_MCL_CURRENT | _MCL_FUTURE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mlockall: {os.strerror(err)}")


def _freeze_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.disable()


def configure_realtime(
    cpus: Sequence[int] | None = None,
    priority: int | None = None,
    lock_memory: bool = True,
    *,
    freeze_gc: bool = True,
) -> dict[str, str]:
    """Best-effort real-time setup for the calling thread/process. Never raises.

    Steps: "affinity" (pin to `cpus`), "scheduler" (SCHED_FIFO at `priority`;
    `DEFAULT_RT_PRIORITY` is the suggested value), "gc" (collect, freeze,
    disable: the loop must not create reference cycles), "mlockall"
    (MCL_CURRENT|MCL_FUTURE). A None/False argument skips its step. Returns
    step -> "ok", "skipped: ..." or the OS's reason; each refusal is logged once.
    """
    steps = {
        "affinity": (cpus is not None, lambda: _set_affinity(cpus or ()), "no cpus given"),
        "scheduler": (
            priority is not None,
            lambda: _set_fifo(int(priority or 0)),
            "no priority given",
        ),
        "gc": (freeze_gc, _freeze_gc, "freeze_gc=False"),
        "mlockall": (lock_memory, _lock_memory, "lock_memory=False"),
    }
    result: dict[str, str] = {}
    for step, (wanted, action, why_not) in steps.items():
        if not wanted:
            result[step] = f"skipped: {why_not}"
            continue
        try:
            action()
            result[step] = "ok"
        except (OSError, ValueError, TypeError, AttributeError, OverflowError) as exc:
            # AttributeError: the platform lacks the call (e.g. macOS sched_*).
            result[step] = _refuse(step, f"{type(exc).__name__}: {exc}")
    return result


@contextlib.contextmanager
def realtime_gc() -> Iterator[None]:
    """Run a block with the GC collected, frozen and disabled; restore it after."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
