"""The controller's freshness rules: is a chunk too old to apply, and has the stream gone quiet?

The controller enforces the deadline itself; safety never depends on another process.
Times are monotonic ns from the controller's own clock: a chunk's `capture` is the stamp
of the robot's own observation, so it can never lie in the robot's future. The quiet
stream is rtinfer.transport.liveliness, the one freshness mechanism of the system.
"""

from __future__ import annotations

from rtinfer.realtime.deadline import DEADLINE_NS
from rtinfer.transport.liveliness import Liveliness

FRESH = "fresh_chunk"  # the one stream the watchdog follows


class Watchdog:
    """`deadline_ns`: the most a chunk's capture stamp may lag the receive time.
    `interval_ns`: when the next fresh chunk is due after one arrived (the policy's period);
    the controller holds when none came for interval + deadline. (A deadline shorter than
    the policy's period is legitimate: it bounds observation -> setpoint latency, not the
    policy's rate.) `uncertainty_ns`: how far a capture may lie ahead of our clock (0: the
    robot stamps its own observations; else the clock estimate's uncertainty), never the
    deadline."""

    def __init__(
        self, deadline_ns: int = DEADLINE_NS, interval_ns: int = 0, uncertainty_ns: int = 0
    ):
        if deadline_ns <= 0 or interval_ns < 0 or uncertainty_ns < 0:
            raise ValueError(
                f"need deadline_ns > 0, interval_ns >= 0 and uncertainty_ns >= 0, "
                f"got {deadline_ns}, {interval_ns}, {uncertainty_ns}"
            )
        self.deadline_ns = int(deadline_ns)
        self.uncertainty_ns = int(uncertainty_ns)
        self.quiet_ns = int(deadline_ns) + int(interval_ns)
        self.live = Liveliness()
        self.plan_end_ns: int | None = None  # the chunk in use's executed horizon ends then

    @property
    def last_fresh_ns(self) -> int | None:
        """Receive time of the newest fresh chunk; None before the first."""
        return self.live[FRESH].last_ns if FRESH in self.live else None

    def too_old(self, capture_ns: int, now_ns: int) -> bool:
        """The observation behind this chunk was captured more than a deadline ago."""
        return now_ns - capture_ns > self.deadline_ns

    def stale(self, capture_ns: int, now_ns: int, window_ns: int = 0) -> bool:
        """Too old to apply: older than the deadline and, for a chunk conditioned on the
        robot's committed prefix, past its window too (window_ns after capture: its first
        waypoint not committed is due then; 0 for an unconditioned chunk)."""
        return now_ns - capture_ns > self.deadline_ns and now_ns - capture_ns >= window_ns

    def from_future(self, capture_ns: int, now_ns: int) -> bool:
        """A capture stamp ahead of our clock (by more than the clock's uncertainty) is bogus:
        another clock, or a forged stamp. Taken, it would outrank every honest chunk."""
        return capture_ns - now_ns > self.uncertainty_ns

    def feed(self, now_ns: int) -> None:
        """A fresh chunk arrived at now_ns."""
        self.live.note(FRESH, int(now_ns))

    def plan_ends(self, end_ns: int | None) -> None:
        """The new chunk is the plan until end_ns, its executed horizon's last waypoint due
        (controllers.pace); None: a chunk without one (the interval + deadline rule)."""
        self.plan_end_ns = end_ns

    def expired(self, now_ns: int) -> bool:
        """Fed at least once, and not within the last interval + deadline; for a chunk
        with an executed horizon, instead, its last waypoint is due (never past it)."""
        if self.plan_end_ns is not None:
            return now_ns >= self.plan_end_ns
        return self.live.overdue(FRESH, self.quiet_ns, now_ns)
