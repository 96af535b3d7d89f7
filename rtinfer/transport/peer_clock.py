"""A peer's clock seen from here: its offset (peer - local, ns), bracketed by messages that
cross both ways, and the peer's stamps moved onto the local clock.

A message takes no negative time, so each one bounds the offset:

    peer -> local, sent at s (peer clock), received at r (local):  offset >= s - r
    local -> peer, sent at s (local clock), received at r (peer):  offset <= r - s

Messages seen one way at a time feed `from_peer` and `to_peer` (the inference node: the
robot's `obs` in, the robot's `trace` of the node's waypoint 0 back). A heartbeat round
trip is one message each way (`echo`, NTP's on-wire timestamps):

    t0 ping sent --> t1 ping received (peer) ... t2 echo sent (peer) --> t3 echo received
    bracket [t2 - t3, t1 - t0]: midpoint ((t1 - t0) + (t2 - t3)) / 2, width the round trip

The tightest bounds of the last `window` messages each way bracket the true offset
(queueing only widens a bound, so the least delayed message sets it; with round trips the
bracket is never wider than the smallest round trip's: NTP's min-RTT filter). `offset_ns`
is the bracket's midpoint, exactly 0 while the bracket holds 0 (one host, where it always
does, or clocks closer than the round trips can tell apart: stamps are then compared as they
are, never moved by noise), and None while either way has no message yet or the bounds
contradict each other (a peer restarted on another host: healed once the old messages have
left the window). Assumes both clocks tick at the same rate over the window (monotonic
clocks drift ~ppm). Pure arithmetic on ints, no clock reads; not thread-safe.
"""

from __future__ import annotations

from collections import deque


class PeerClock:
    """Offset of one peer's clock from this one's, from its last `window` messages each way.
    `rejected` counts round trips whose own stamps are impossible (see `echo`)."""

    def __init__(self, window: int = 32) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._low: deque[int] = deque(maxlen=window)  # s - r of peer -> local messages
        self._high: deque[int] = deque(maxlen=window)  # r - s of local -> peer messages
        self.rejected = 0

    def from_peer(self, sent_peer_ns: int, recv_local_ns: int) -> None:
        """A message the peer sent (its clock) and this node received (this clock)."""
        self._low.append(sent_peer_ns - recv_local_ns)

    def to_peer(self, sent_local_ns: int, recv_peer_ns: int) -> None:
        """A message this node sent (this clock) and the peer received (its clock)."""
        self._high.append(recv_peer_ns - sent_local_ns)

    def echo(self, t0: int, t1: int, t2: int, t3: int) -> bool:
        """One round trip: ping sent t0 and echo received t3 (this clock), ping received t1
        and echo sent t2 (the peer's). False, counted in `rejected` and not used, if the
        stamps are impossible: the echo arrived before the ping left, the peer answered
        before it received, or the peer held it longer than the whole trip."""
        if t3 < t0 or t2 < t1 or (t3 - t0) < (t2 - t1):
            self.rejected += 1
            return False
        self.to_peer(t0, t1)
        self.from_peer(t2, t3)
        return True

    @property
    def count(self) -> int:
        """Messages in the window the way fewer have come (round trips, when fed by echo)."""
        return min(len(self._low), len(self._high))

    def bounds(self) -> tuple[int, int] | None:
        """(lowest, highest) offset the messages allow (ns), or None before both ways."""
        if not self._low or not self._high:
            return None
        return max(self._low), min(self._high)

    @property
    def offset_ns(self) -> int | None:
        """Peer clock minus this clock (ns): 0 if the bracket holds 0, None if unknown."""
        b = self.bounds()
        if b is None or b[0] > b[1]:
            return None
        lo, hi = b
        return 0 if lo <= 0 <= hi else (lo + hi) // 2

    @property
    def uncertainty_ns(self) -> float:
        """Half the bracket's width (inf if unknown): the true offset is within the bracket's
        midpoint ± this, and so within offset_ns ± this unless offset_ns is the 0 it holds."""
        b = self.bounds()
        return (b[1] - b[0]) / 2 if b is not None and b[0] <= b[1] else float("inf")

    def to_local(self, peer_ns: int) -> int:
        """A stamp of the peer's clock on this one (as it is while the offset is unknown)."""
        return peer_ns - (self.offset_ns or 0)

    def report(self) -> dict:
        """For summaries: the bracket's midpoint (offset_ms; 0.0 while unknown), the offset
        stamps are moved by (applied_ms), uncertainty_ms (None while unknown), the bracket's
        width (rtt_ms), messages each way (samples) and rejected round trips."""
        b = self.bounds()
        if b is not None and b[0] > b[1]:
            b = None  # an empty bracket: unknown
        return {
            "offset_ms": (b[0] + b[1]) / 2e6 if b is not None else 0.0,
            "applied_ms": (self.offset_ns or 0) / 1e6,
            "uncertainty_ms": self.uncertainty_ns / 1e6 if b is not None else None,
            "rtt_ms": (b[1] - b[0]) / 1e6 if b is not None else 0.0,
            "samples": self.count,
            "rejected": self.rejected,
        }
