"""Complaints: loud, rate-limited error lines from a loop that must not stop or flood.

A node that drops input it cannot use (an observation that does not match its model, a
chunk for another robot or of another spec) says so on stderr at once, then at most once a
second per kind, each line with how many more came since the last. No clock read unless a
complaint is made; nothing allocated per suppressed one beyond a counter.
"""
from __future__ import annotations

import sys
import time

PERIOD_NS = 1_000_000_000


class Complaints:
    def __init__(self, name: str, stream=None):
        self.name, self.stream = name, stream
        self._state: dict[str, list[int]] = {}  # kind -> [suppressed, last line ns]

    def say(self, kind: str, message) -> None:
        """One line `name: error: message` now, unless this kind had one under a second ago
        (then it is counted). `message` may be a callable, built only when a line goes out."""
        now = time.monotonic_ns()
        st = self._state.setdefault(kind, [0, -PERIOD_NS])
        if now - st[1] < PERIOD_NS:
            st[0] += 1
            return
        text = message() if callable(message) else message
        more = f" ({st[0]} more since the last line)" if st[0] else ""
        print(f"{self.name}: error: {text}{more}", file=self.stream or sys.stderr, flush=True)
        st[0], st[1] = 0, now
