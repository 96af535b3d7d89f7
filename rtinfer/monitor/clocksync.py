"""Clock offsets between hosts from heartbeat round trips (NTP's on-wire calculation).

One round trip, t0/t3 on the local (monitor) clock and t1/t2 on the remote node's:

    t0 ping sent --> t1 ping received (remote) ... t2 echo sent (remote) --> t3 echo received
    offset = ((t1 - t0) + (t2 - t3)) / 2      (remote clock - local clock)
    rtt    = (t3 - t0) - (t2 - t1)            (time on the wire, both ways)

Whatever the split of rtt between the two directions, the true offset lies within
offset ± rtt/2. Queueing only ever adds delay, so of a window of recent samples the one
with the smallest rtt is the least disturbed (the min-RTT filter of NTP's clock filter):
it gives the estimate, and its rtt/2 is the stated uncertainty.

Stamps are moved by `correction_ns`: the estimate, or exactly 0 while offset ± uncertainty
holds 0 (the rule of rtinfer.transport.heartbeat.PeerClock). On one host that interval
always holds 0 (offset + rtt/2 = t1 - t0 >= 0 and offset - rtt/2 = t2 - t3 <= 0 on one
clock), so one host's stamps are compared as they are, never shifted by a noisy estimate;
across hosts, clocks closer than the round trips can tell apart are left alone too.
Assumes both clocks tick at the same rate over the window (monotonic clocks drift ~ppm:
microseconds a second).
Pure arithmetic on ints, no clock reads; not thread-safe.
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple


class ClockSample(NamedTuple):
    offset_ns: float  # remote - local
    rtt_ns: int
    t3_ns: int        # local arrival of the echo


def round_trip(t0: int, t1: int, t2: int, t3: int) -> ClockSample:
    """One sample from the four timestamps (ns): t0, t3 local; t1, t2 remote."""
    return ClockSample(((t1 - t0) + (t2 - t3)) / 2, (t3 - t0) - (t2 - t1), t3)


class OffsetEstimator:
    """Min-RTT filtered offset of one remote clock relative to the local one.

    window: how many recent samples are kept; the best of them is the estimate, so a
    burst of queueing shorter than the window never moves it, and a changed path (or a
    restarted node) is picked up once the old samples have left the window.
    """

    def __init__(self, window: int = 32) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.samples: deque[ClockSample] = deque(maxlen=window)
        self.rejected = 0  # impossible samples: negative rtt (clock or echo corrupted)
        self._best: ClockSample | None = None

    def add(self, t0: int, t1: int, t2: int, t3: int) -> bool:
        """Add one round trip; False (and counted) if its timestamps are inconsistent."""
        s = round_trip(t0, t1, t2, t3)
        if s.rtt_ns < 0 or t3 < t0 or t2 < t1:
            self.rejected += 1
            return False
        evicted = self.samples[0] if len(self.samples) == self.samples.maxlen else None
        self.samples.append(s)
        if self._best is None or evicted is self._best:
            self._best = min(self.samples, key=lambda x: x.rtt_ns)  # O(window), rare
        elif s.rtt_ns <= self._best.rtt_ns:
            self._best = s  # ties: the newer sample wins
        return True

    @property
    def count(self) -> int:
        return len(self.samples)

    @property
    def valid(self) -> bool:
        return self._best is not None

    @property
    def offset_ns(self) -> float:
        """Remote clock minus local clock (ns); 0.0 before the first sample."""
        return self._best.offset_ns if self._best else 0.0

    @property
    def uncertainty_ns(self) -> float:
        """Half the best rtt: the true offset is within offset_ns ± this. inf if unknown."""
        return self._best.rtt_ns / 2 if self._best else float("inf")

    @property
    def rtt_ns(self) -> int:
        return self._best.rtt_ns if self._best else 0

    @property
    def correction_ns(self) -> float:
        """What `to_local` subtracts: offset_ns, or 0.0 while the true offset may be 0
        (|offset_ns| <= uncertainty_ns: one host, or clocks the round trips cannot tell
        apart) or no sample has come yet."""
        if self._best is None or abs(self.offset_ns) <= self.uncertainty_ns:
            return 0.0
        return self.offset_ns

    def to_local(self, remote_ns: int) -> int:
        """A remote clock stamp expressed on the local clock (moved by correction_ns)."""
        return int(remote_ns - self.correction_ns)

    def report(self) -> dict:
        """offset, the correction applied to stamps, uncertainty and rtt in ms, sample count
        and rejects (for summaries)."""
        return {"offset_ms": self.offset_ns / 1e6, "applied_ms": self.correction_ns / 1e6,
                "uncertainty_ms": self.uncertainty_ns / 1e6 if self.valid else None,
                "rtt_ms": self.rtt_ns / 1e6, "samples": self.count, "rejected": self.rejected}
