"""The robots file: the robots an inference node serves, learned at run time.

    {"cell-1": "tcp://10.10.0.11:5555", "cell-2": "ipc:///run/rtinfer/obs-2"}

A JSON object, robot name -> the obs endpoint that robot binds. The node (`--robots-file
PATH`) connects to every endpoint listed, on top of its `--obs` ones, and re-reads the file
when it changes (a stat at most every CHECK_EVERY_NS): a robot added is connected to and
admitted whatever the costs measured now (rtinfer.inference.admission: only --max-robots
refuses it; the node degrades), a robot removed is let go at once
(its slot freed, its endpoint disconnected). Whoever writes the file (rtinfer.fleet's host
actor, an operator) replaces it atomically (write elsewhere, then rename): a file that does
not parse is said once, with the fix, and the node keeps serving the robots it read last.
A missing file is no robots. Pure bookkeeping: every time is passed in; not thread-safe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

CHECK_EVERY_NS = 100_000_000  # how often the file's stat is looked at (~2 us each)


class RobotsFile:
    """`changed(now_ns)`: the robots as read anew (name -> endpoint) when the file changed
    since the last look and parses, else None. `robots` is what was read last."""

    def __init__(self, path: str | os.PathLike, say: Callable[..., None]) -> None:
        self.path = os.fspath(path)
        self.say = say
        self.robots: dict[str, str] = {}
        self._seen: tuple | None = None
        self._next_ns = 0

    def changed(self, now_ns: int) -> dict[str, str] | None:
        if now_ns < self._next_ns:
            return None
        self._next_ns = now_ns + CHECK_EVERY_NS
        try:
            st = os.stat(self.path)
            seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            seen = ()
        if seen == self._seen:
            return None
        self._seen = seen
        robots = self._read() if seen else {}
        if robots is None or robots == self.robots:
            return None
        self.robots = robots
        return robots

    def _read(self) -> dict[str, str] | None:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            why = str(e)
            self.say(
                "robots_file",
                lambda: (
                    f"robots file {self.path} not read ({why}); it "
                    f"must be a JSON object {{robot: obs endpoint}}, "
                    f"replaced atomically (write, then rename)"
                ),
            )
            return None
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and "://" in v for k, v in data.items()
        ):
            self.say(
                "robots_file",
                lambda: (
                    f"robots file {self.path} is not a JSON object "
                    f"{{robot: obs endpoint}}: kept the robots read "
                    f"before ({', '.join(self.robots) or 'none'})"
                ),
            )
            return None
        return data
