"""spin(node, seconds): the one event loop of a node that is paced by its input.

A node is anything with `running` (bool), `spin_once(timeout_ms)` and `stop()`: the
inference node and the monitor. The controller is paced by its RateKeeper instead.
"""
from __future__ import annotations

import signal
import time
from typing import Protocol


class Spinnable(Protocol):
    running: bool

    def spin_once(self, timeout_ms: int) -> object: ...

    def stop(self) -> None: ...


def spin(node: Spinnable, seconds: float | None = None, timeout_ms: int = 50) -> None:
    """Call node.spin_once(timeout_ms) until node.running is False or `seconds` elapse
    (None: no limit). Blocks; each call waits at most timeout_ms for input."""
    end = None if seconds is None else time.monotonic_ns() + int(seconds * 1e9)
    while node.running and (end is None or time.monotonic_ns() < end):
        node.spin_once(timeout_ms)


def stop_on_signals(node: Spinnable) -> None:
    """SIGINT and SIGTERM call node.stop(): the loop ends after the current spin_once, and
    the caller's cleanup (reports, closing sockets) runs. Main thread only."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: node.stop())
