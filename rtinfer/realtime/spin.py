"""spin(node, seconds): the one event loop of a node that is paced by its input; and
on_signals, the one way a process turns SIGINT/SIGTERM into a clean stop.

A node is anything with `running` (bool), `spin_once(timeout_ms)` and `stop()`: the
inference node and the monitor. The controller is paced by its RateKeeper instead.
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Protocol

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


@contextmanager
def on_signals(handler: Callable[[int], None]) -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM call handler(signum) instead of ending the
    process, so the loop stops where it checks and its cleanup (reports, closing sockets)
    runs; the previous handlers come back when the block ends. Main thread only."""
    old = {s: signal.signal(s, lambda signum, _frame: handler(signum)) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
