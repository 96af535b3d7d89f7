"""spin(node, seconds): the one event loop of a node that is paced by its input; and
on_signals, the one way a process turns SIGINT/SIGTERM into a clean stop.

A node is anything with `running` (bool), `spin_once(timeout_ms)` and `stop()`: the
inference node and the monitor. The controller is paced by its RateKeeper instead.
"""

from __future__ import annotations

import gc
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Spinnable(Protocol):
    running: bool

    def spin_once(self, timeout_ms: int) -> object: ...

    def stop(self) -> None: ...


def spin(node: Spinnable, seconds: float | None = None, timeout_ms: int = 50) -> None:
    """Call node.spin_once(timeout_ms) until node.running is False or `seconds` elapse
    (None: no limit). Blocks; each call waits at most timeout_ms for input.

    What exists when the loop starts (the model, the sessions, the modules) is frozen out of
    the garbage collector for the loop's life: a full collection then walks only what the
    loop made since, not every object of the process (a node's 9 ms became microseconds),
    so the GC that still runs (a loop may make cycles) never stalls a cycle."""
    end = None if seconds is None else time.monotonic_ns() + int(seconds * 1e9)
    gc.collect()
    gc.freeze()
    try:
        while node.running and (end is None or time.monotonic_ns() < end):
            node.spin_once(timeout_ms)
    finally:
        gc.unfreeze()


def serve(node, seconds: float | None, ready: str) -> None:
    """A node process's life after start-up: say `ready` (one line: the launcher and the
    tests wait for it), run until a stop, SIGINT/SIGTERM or `seconds`, then close it
    whatever happened. `node` has run(seconds), stop() and close()."""
    with on_signals(lambda _signum: node.stop()):
        print(ready, flush=True)
        try:
            node.run(seconds)
        finally:
            node.close()


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
