"""ChunkAssembler: the action chunk under assembly, one waypoint message at a time.

A policy streams a chunk as `count` messages, one waypoint each, in any order. The
assembler keeps the newest chunk: its key (src, cycle, capture_ns), its capture and
period, which waypoints have arrived, and `ready`, how many leading waypoints the tracker
may follow. Buffers are allocated once (horizon x dim); add() copies a waypoint into its
row. Not thread-safe.
"""

from __future__ import annotations

import numpy as np


class ChunkAssembler:
    def __init__(self, horizon: int, dim: int) -> None:
        self.waypoints = np.zeros((horizon, dim))  # row i: waypoint i of the chunk held
        self._got = np.zeros(horizon, bool)
        self.key: tuple | None = None  # (src, cycle, capture_ns); None before the first
        self.capture_ns = self.period_ns = self.start_ns = self.count = 0
        self.stamps: dict = {}  # stamps of the chunk's first waypoint message
        self.received = 0  # waypoints of this chunk added
        self.ready = 0  # waypoints[:ready] have all arrived
        self.applied = 0  # leading waypoints handed on (the caller's, per chunk)
        self.window_ns = 0  # fresh this long after capture by a committed prefix

    @property
    def horizon(self) -> int:
        return len(self._got)

    @property
    def cycle(self) -> int:
        assert self.key is not None, "no chunk yet"
        return self.key[1]

    @property
    def complete(self) -> bool:
        return self.ready == self.count

    def add(
        self,
        src: str,
        cycle: int,
        capture_ns: int,
        index: int,
        count: int,
        period_ns: int,
        waypoint: np.ndarray,
        stamps: dict | None = None,
        start_ns: int | None = None,
        window_ns: int = 0,
    ) -> str | None:
        """Add waypoint `index` of `count`; None if taken, else the counter to reject it under.

        Another (src, cycle, capture_ns) starts a new chunk in place of the one held,
        unless it was captured earlier (rejected_stale). Within a chunk, a count, period or
        start (waypoint 0's due time after capture; None: one period) that differs from its
        first waypoint's, or a repeated index, is rejected_bad.
        The caller checks 0 <= index < count <= horizon. `stamps` is kept, not copied.
        window_ns: a new chunk's window (controllers.rtc; 0: unconditioned).
        """
        key = (src, cycle, capture_ns)  # capture too: a restarted policy may reuse cycles
        start_ns = period_ns if start_ns is None else start_ns
        if key != self.key:
            if self.key is not None and capture_ns < self.capture_ns:
                return "rejected_stale"  # older than the chunk in use
            self.key, self.capture_ns, self.count = key, capture_ns, count
            self.period_ns, self.start_ns, self.window_ns = period_ns, start_ns, window_ns
            self.stamps = {} if stamps is None else stamps
            self.received = self.ready = self.applied = 0
            self._got[:] = False
        elif (count, period_ns, start_ns) != (
            self.count,
            self.period_ns,
            self.start_ns,
        ) or self._got[index]:
            return "rejected_bad"  # inconsistent with its chunk, or a repeat
        self.waypoints[index] = waypoint
        self._got[index] = True
        self.received += 1
        while self.ready < self.count and self._got[self.ready]:
            self.ready += 1
        return None
