"""Pace: the robot's part that takes what a node under overload asks of it.

A robot configured with `open_loop_ms` (ControllerConfig) says so in each `obs`
(`open_loop_ns`: the longest it executes one chunk after that observation's capture), and
takes two asks from the chunks it is sent (docs/wire.md section 5, "Overload"):

- `obs_period_ns`: it sends observations no more often than that (hold_back(): the
  observe step counts each one held back, obs_slowed), at most its open loop. The ask is
  the newest taken chunk's: one without it ends it, and it lapses 2 periods and a deadline
  after that chunk's capture (a node that stopped answering asks nothing).
- `executes` e: the chunk is its plan, and fresh, until waypoint e-1 is due (its window:
  start_ns + (e-1) * period_ns after capture, at most open_loop_ns), even past the
  deadline, and never past that: the watchdog holds then if no newer chunk was taken
  (ChunkIntake, Watchdog.plan_ends). A robot not configured takes neither: it declares
  nothing, so no node asks it, and a chunk that asks anyway is held to the deadline.

Pure: no clock, no socket. Not thread-safe (the loop's thread).
"""

from __future__ import annotations


class Pace:
    def __init__(self, open_loop_ns: int | None, deadline_ns: int):
        """open_loop_ns: the robot's limit (None: it takes no asks)."""
        self.open_loop_ns = None if open_loop_ns is None else int(open_loop_ns)
        self.deadline_ns = int(deadline_ns)
        self.asked_ns: int | None = None  # the observation period asked, as honoured
        self._asked_until = 0  # ... until then (capture ns)
        self._last_sent: int | None = None  # capture of the last observation sent

    def declare(self, body: dict) -> None:
        """An obs body about to be sent: `open_loop_ns` when the robot takes asks."""
        if self.open_loop_ns is not None:
            body["open_loop_ns"] = self.open_loop_ns

    def hold_back(self, capture_ns: int) -> bool:
        """Is an observation captured now sooner than the period asked after the last?"""
        return (
            self.asked_ns is not None
            and self._last_sent is not None
            and capture_ns < self._asked_until
            and capture_ns - self._last_sent < self.asked_ns
        )

    def sent(self, capture_ns: int) -> None:
        self._last_sent = capture_ns

    def window_ns(self, body: dict) -> int:
        """How long after capture a waypoint with this body is fresh by its executed
        horizon (0: none, or this robot takes no asks)."""
        e = body.get("executes")
        if e is None or self.open_loop_ns is None:
            return 0
        return min(body["start_ns"] + (e - 1) * body["period_ns"], self.open_loop_ns)

    def taken(self, body: dict, capture_ns: int) -> None:
        """A new chunk was taken: its observation period ask is the one honoured."""
        asked = body.get("obs_period_ns")
        if asked is None or self.open_loop_ns is None:
            self.asked_ns = None
            return
        self.asked_ns = min(int(asked), self.open_loop_ns)
        self._asked_until = capture_ns + 2 * self.asked_ns + self.deadline_ns
