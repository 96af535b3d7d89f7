"""Real-time kit: a drift-free rate keeper and best-effort OS real-time setup.

A loop reads like openpilot's: ``update(); compute(); publish(); rk.keep_time()``.

The OS set-up (`configure_realtime`, `realtime_gc`: affinity, SCHED_FIFO, GC,
mlockall) lives in rtinfer.realtime.os_setup and is re-exported here. RateKeeper's busy-spin is
bounded by `spin_s` per tick (250 us of each 1 ms at 1 kHz); the rest of the wait is a
real sleep, so it is safe under SCHED_FIFO.
"""

from __future__ import annotations

import time

from rtinfer.realtime.hist import LatencyHistogram

DEFAULT_SPIN_S = 250e-6  # busy-spin this long before each deadline (wake-up jitter)
DEFAULT_LAG_FRACTION = 0.5  # a tick later than this fraction of a period is lagging

_clock_ns = time.monotonic_ns  # the one clock for stamps and schedules (see wire.now_ns)


class RateKeeper:
    """Keep a loop at `hz` on an absolute schedule: deadline k = anchor + k * period.

    Call `keep_time()` once at the end of each iteration (sleeps, then spins the
    last `spin_s` to the deadline) or `monitor_time()` for a loop paced by
    something else (only measures). Errors never accumulate: each deadline is
    computed from the anchor, not from the previous wake-up. The anchor is the
    construction time; call `reset()` if the loop starts much later.

    A tick later than one whole period re-anchors the schedule at that tick
    (the missed frames are counted in `skipped_frames`) instead of bursting
    through back-to-back iterations to catch up.

    Per tick, lateness (ns past the deadline, >= 0) goes into `lateness`, a
    preallocated histogram: no allocation, no logging. Not thread-safe.
    """

    def __init__(
        self,
        hz: float,
        name: str = "loop",
        *,
        spin_s: float = DEFAULT_SPIN_S,
        lag_fraction: float = DEFAULT_LAG_FRACTION,
    ):
        if not hz > 0:
            raise ValueError(f"RateKeeper {name!r}: hz must be > 0, got {hz}")
        self.name = name
        self.period_ns = max(1, round(1e9 / hz))
        self.spin_ns = max(0, round(spin_s * 1e9))
        self.lag_ns = round(lag_fraction * self.period_ns)
        self.lateness = LatencyHistogram()
        self.late_ticks = 0  # ticks that ended lagging (any cause: work or OS)
        self.overruns = 0  # ticks whose own work overran the deadline
        self.skipped_frames = 0  # frames dropped by re-anchoring
        self.reanchors = 0
        self._frame = 0
        self._remaining = 0.0
        self._lagging = False
        self.reset()

    def reset(self) -> None:
        """Re-anchor the schedule at now: the next deadline is one period away."""
        self._anchor_ns = _clock_ns()
        self._k = 1
        self._deadline_ns = self._anchor_ns + self.period_ns
        self._phase_free = True  # a monitor_time loop takes its phase from its first tick

    @property
    def frame(self) -> int:
        """Ticks so far (calls to keep_time/monitor_time)."""
        return self._frame

    @property
    def remaining(self) -> float:
        """Seconds left before the deadline when the last tick was called (<0: late)."""
        return self._remaining

    @property
    def lagging(self) -> bool:
        """True if the last tick ended more than lag_fraction * period past its deadline."""
        return self._lagging

    @property
    def deadline_ns(self) -> int:
        """Monotonic ns deadline of the next tick."""
        return self._deadline_ns

    def keep_time(self) -> bool:
        """Block until the next deadline (sleep, then spin). Returns `lagging`."""
        deadline = self._deadline_ns
        now = _clock_ns()
        remaining = deadline - now
        if remaining > 0:
            coarse_ns = remaining - self.spin_ns
            if coarse_ns > 0:
                time.sleep(coarse_ns / 1e9)
            now = _clock_ns()
            while now < deadline:  # bounded by spin_ns unless the sleep returned early
                now = _clock_ns()
        return self._tick(deadline, now, remaining)

    def monitor_time(self) -> bool:
        """Measure this tick against the schedule without waiting. Returns `lagging`.

        The first tick after construction/reset sets the phase, so a loop paced
        by, e.g., a sensor is not judged late for an arbitrary start offset.
        """
        now = _clock_ns()
        if self._phase_free:
            self._anchor_ns, self._k, self._deadline_ns = now - self.period_ns, 1, now
        deadline = self._deadline_ns
        return self._tick(deadline, now, deadline - now)

    def _tick(self, deadline: int, now: int, remaining_ns: int) -> bool:
        late_ns = now - deadline
        self._phase_free = False
        self._frame += 1
        self._remaining = remaining_ns / 1e9
        self.lateness.record(late_ns if late_ns > 0 else 0)
        self._lagging = late_ns > self.lag_ns
        self.late_ticks += self._lagging
        self.overruns += remaining_ns < 0
        # Off the schedule by more than a period (behind, or far ahead when an
        # external pace runs fast): start a fresh schedule from this tick.
        if late_ns > self.period_ns or -late_ns > self.period_ns:
            if late_ns > 0:
                self.skipped_frames += late_ns // self.period_ns
            self.reanchors += 1
            self._anchor_ns = now
            self._k = 1
        else:
            self._k += 1
        self._deadline_ns = self._anchor_ns + self._k * self.period_ns
        return self._lagging
