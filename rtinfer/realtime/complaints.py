"""The one way rtinfer says what went wrong (or right again) on stderr, outside the `rtinfer`
command's own output (rtinfer/cli): `say` for a line said once (a refused start, a report
not written), `Complaints` for loud, rate-limited lines from a loop that must not stop or
flood. tests/test_one_error_reporter.py keeps bare stderr prints out of everything else.

A node that drops input it cannot use (an observation that does not match its model, a
chunk for another robot or of another spec) says so on stderr at once, then at most once a
second per kind, each line with how many more came since the last. Lines that are news but
not errors (a refused robot admitted after all, a load that fits again) go the same way with
error=False. No clock read unless a complaint is made; nothing allocated per suppressed one
beyond a counter.
"""

from __future__ import annotations

import sys
import time

PERIOD_NS = 1_000_000_000


def say(name: str | None, message: str, *, error: bool = True, stream=None) -> None:
    """One line on stderr (or `stream`) now, flushed: `name: error: message`, `name: message`
    with error=False, the message alone with name None. Not rate-limited: for a line a
    program says once; a loop's lines go through Complaints."""
    head = "" if name is None else f"{name}: {'error: ' if error else ''}"
    print(f"{head}{message}", file=stream or sys.stderr, flush=True)


class Complaints:
    def __init__(self, name: str, stream=None):
        self.name, self.stream = name, stream
        self._state: dict[str, list[int]] = {}  # kind -> [suppressed, last line ns]

    def say(self, kind: str, message, *, error: bool = True) -> None:
        """One line `name: error: message` (`name: message` with error=False) now, unless
        this kind had one under a second ago (then it is counted). `message` may be a
        callable, built only when a line goes out."""
        now = time.monotonic_ns()
        st = self._state.setdefault(kind, [0, -PERIOD_NS])
        if now - st[1] < PERIOD_NS:
            st[0] += 1
            return
        text = message() if callable(message) else message
        more = f" ({st[0]} more since the last line)" if st[0] else ""
        say(self.name, f"{text}{more}", error=error, stream=self.stream)
        st[0], st[1] = 0, now
