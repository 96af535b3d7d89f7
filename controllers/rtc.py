"""Real-time chunking, the robot's part: what it has committed to, and whether a chunk joins it.

A new chunk is computed from an observation captured d ago; by the time it lands the robot
has run d more of its plan. With each observation this part names the waypoints of the plan
in use that will run before that observation's chunk can land (the committed prefix,
rtinfer.transport.committed): waypoints from..from+n-1 of the chunk in use, `from` the one
due when the new chunk's waypoint 0 is (capture + start_ns, to the nearest period) and n
the count due by capture + d. d is measured here, per robot, from the robot's own stamps:
capture -> first setpoint applied for each applied cycle, capture -> arrival for a late
one; the estimate is the `percentile` (90 by default) of the last `window` (32) cycles plus
`margin_ms`, and the window it commits to is bounded by `max_ms` and by the policy's
max_committed (its action spec's; else the horizon less one: a chunk keeps at least one
waypoint of its own).

While an observation awaits its chunk (until the chunk's first waypoint arrives, or the
deadline or its prefix's window passes), the next is held back (awaiting(); the controller
counts obs_held_rtc): one in flight at a time, so the chunk in use when a prefix is named is
the one the robot still executes when its answer lands.

A chunk whose waypoints name `conditioned` {chunk, from, n, hash} joins only the plan it
names: joins() is true only while the robot is tracking the chunk of cycle `chunk`, holds
its waypoints from..from+n-1, `from` is the one due with the new chunk's waypoint 0, and
they hash to `hash`. Such a chunk is fresh until its first waypoint not committed is due
(capture + start_ns + n * period_ns), even past the deadline (Watchdog.stale). Nothing here
allocates per tick: prefix() and joins() run once per observation and once per new chunk,
into buffers made once (the hash and the obs body's map aside). Not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rtinfer.transport.committed import REST, committed_body, prefix_hash

__all__ = ["REST", "Commitments", "DelayEstimate", "RtcConfig"]

from .assembler import ChunkAssembler


@dataclass
class RtcConfig:
    """percentile: of the recent delays, the one the robot commits by; window: how many
    recent cycles; margin_ms: added (a tick, the apply check); max_ms: the longest a robot
    commits to after capture (and the longest a conditioned chunk stays fresh)."""

    percentile: float = 90.0
    window: int = 32
    margin_ms: float = 2.0
    max_ms: float = 500.0
    max_committed: int | None = None  # the policy's own limit where its action spec cannot
    # carry one (an action-token model's card.json; controllers.robot_files.card_max_committed)

    def __post_init__(self) -> None:
        wrong = [
            w
            for ok, w in (
                (0 < self.percentile <= 100, f"percentile={self.percentile} must be in (0, 100]"),
                (self.window >= 1, f"window={self.window} must be >= 1"),
                (self.margin_ms >= 0, f"margin_ms={self.margin_ms} must be >= 0"),
                (self.max_ms > 0, f"max_ms={self.max_ms} must be > 0"),
                (
                    self.max_committed is None or self.max_committed >= 0,
                    f"max_committed={self.max_committed} must be >= 0",
                ),
            )
            if not ok
        ]
        if wrong:
            raise ValueError(
                "rtc config: " + "; ".join(wrong) + " (e.g. percentile 90, "
                "window 32, margin_ms 2, max_ms 500)"
            )

    @classmethod
    def from_dict(cls, d: dict | None) -> RtcConfig | None:
        return None if d is None else cls(**d)


class DelayEstimate:
    """capture -> chunk applied, per cycle, on the robot's clock: a ring of the last
    `window` samples and their percentile."""

    def __init__(self, window: int = 32, percentile: float = 90.0):
        self._ring = np.zeros(window, np.int64)
        self._sorted = np.zeros(window, np.int64)
        self._n = self._i = 0
        self.percentile = percentile

    def record(self, delay_ns: int) -> None:
        self._ring[self._i] = max(int(delay_ns), 0)
        self._i = (self._i + 1) % len(self._ring)
        self._n = min(self._n + 1, len(self._ring))

    def estimate_ns(self) -> int | None:
        """The percentile of the samples held (the sample at that rank); None before one."""
        n = self._n
        if n == 0:
            return None
        s = self._sorted[:n]
        s[:] = self._ring[:n]
        s.sort()
        return int(s[min(n - 1, int(np.ceil(self.percentile / 100 * n)) - 1)])


class Commitments:
    """The robot's real-time chunking part: its delay estimate, the prefix it commits to,
    the observation in flight, and the join check (module doc)."""

    def __init__(self, cfg: RtcConfig, horizon: int, dim: int, max_n: int | None = None):
        """max_n: the most waypoints the policy conditions on (its action spec's
        max_committed; None: the horizon less one); cfg.max_committed, where set, wins."""
        self.cfg = cfg
        max_n = cfg.max_committed if cfg.max_committed is not None else max_n
        self.max_n = horizon - 1 if max_n is None else min(int(max_n), horizon - 1)
        self.delay = DelayEstimate(cfg.window, cfg.percentile)
        self._values = np.zeros((horizon, dim), np.float32)  # a prefix sent or checked
        self._margin_ns, self._max_ns = int(cfg.margin_ms * 1e6), int(cfg.max_ms * 1e6)
        self._awaited: tuple[int, int] | None = None  # (capture, until) of the obs in flight

    def sent(self, capture_ns: int, until_ns: int) -> None:
        """An obs went out: its chunk is awaited until until_ns (the deadline, or its
        prefix's window where later: past it the chunk would be stale)."""
        self._awaited = (capture_ns, until_ns)

    def answered(self, capture_ns: int | None) -> None:
        """A waypoint arrived (taken or not): if it answers the awaited obs, none is."""
        if self._awaited is not None and capture_ns == self._awaited[0]:
            self._awaited = None

    def awaiting(self, now_ns: int) -> bool:
        """An obs is in flight: the next waits. Were it sent, the chunk in use would be
        replaced by the awaited one before its own answer lands, and that answer would name
        a prefix the robot no longer executes (one in flight at a time, as Physical
        Intelligence's and LeRobot's RTC run inference)."""
        return self._awaited is not None and now_ns < self._awaited[1]

    def prefix(self, chunk: ChunkAssembler, tracking: bool, capture_ns: int) -> dict | None:
        """The `committed` map for an observation captured at capture_ns, or None (not
        tracking a chunk, no delay measured yet, or nothing of the plan due before the new
        chunk lands). Its values are a view of a buffer reused by the next call."""
        d = self.delay.estimate_ns()
        if not tracking or d is None or chunk.key is None or chunk.applied == 0:
            return None
        p, s = chunk.period_ns, chunk.start_ns
        d = min(d + self._margin_ns, self._max_ns)
        start = (capture_ns - chunk.capture_ns + p // 2) // p  # the new chunk's waypoint 0
        n = (d - s) // p + 1 if d >= s else 0  # due by capture + d: run before it lands
        n = min(n, chunk.ready - start, self.max_n)
        if start < 0 or n <= 0:
            return None
        v = self._values[:n]
        v[:] = chunk.waypoints[start : start + n]
        return committed_body(chunk.cycle, start, v, chunk.capture_ns + s + start * p)

    def rest_prefix(
        self, hold: np.ndarray, capture_ns: int, start_ns: int, period_ns: int
    ) -> dict | None:
        """The `committed` map of a robot at rest (idle, or stopped by a hold): n rows of its
        hold waypoint `hold` (D,), chunk REST, from 0, due from capture + start_ns (the
        policy's), n as prefix() counts it; None before a delay is measured or when the
        chunk lands before its waypoint 0 is due. A buffer reused by the next call."""
        d = self.delay.estimate_ns()
        if d is None:
            return None
        d = min(d + self._margin_ns, self._max_ns)
        n = min((d - start_ns) // period_ns + 1 if d >= start_ns else 0, self.max_n)
        if n <= 0:
            return None
        v = self._values[:n]
        v[:] = hold
        return committed_body(REST, 0, v, capture_ns + start_ns)

    def joins(
        self,
        chunk: ChunkAssembler,
        tracking: bool,
        named: dict,
        capture_ns: int,
        rest: np.ndarray | None = None,
    ) -> bool:
        """Does a chunk captured at capture_ns and conditioned on `named` ({chunk, from, n,
        hash}) join what this robot executes: the chunk in use is cycle `chunk`, tracked,
        holding waypoints from..from+n-1, `from` is the one due with the new chunk's
        waypoint 0 (as prefix() picks it), and they hash to `hash`? For chunk REST: the robot
        is at rest (`rest`: its hold waypoint, None when it is not) and n rows of it hash so."""
        s, n = named["from"], named["n"]
        if named["chunk"] == REST:
            if rest is None or s != 0 or n > len(self._values):
                return False
            v = self._values[:n]
            v[:] = rest
            return prefix_hash(v) == named["hash"]
        if (
            not tracking
            or chunk.key is None
            or chunk.applied == 0
            or chunk.cycle != named["chunk"]
            or s + n > chunk.ready
            or s != (capture_ns - chunk.capture_ns + chunk.period_ns // 2) // chunk.period_ns
        ):
            return False
        v = self._values[:n]
        v[:] = chunk.waypoints[s : s + n]
        return prefix_hash(v) == named["hash"]

    def window_ns(self, body: dict) -> int:
        """How long after capture a waypoint with this body is fresh by its committed prefix:
        start_ns + n * period_ns, at most max_ms (0: unconditioned)."""
        named = body.get("conditioned")
        if named is None:
            return 0
        return min(body["start_ns"] + named["n"] * body["period_ns"], self._max_ns)
