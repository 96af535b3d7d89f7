"""What the bridge's ROS-thread checks share: a message's header stamp moved onto this host's
monotonic clock, and refusals counted per kind and said once (one line on stderr, the first
time; the loop runs on). What is taken but noted (an unstamped message) is counted the same
way, said as "took" instead of "refused"."""

from __future__ import annotations

from rtinfer.realtime import complaints


def say(line: str) -> None:
    """One line on stderr, as the bridge says things (rtinfer.realtime.complaints.say)."""
    complaints.say("ros2 bridge", line, error=False)


def capture_ns(stamp, recv_ns: int, wall_ns: int) -> int:
    """A header stamp (the sender's ROS clock: wall time) on the monotonic clock, given the
    receipt instant on both clocks; recv_ns when the stamp is 0 (unstamped)."""
    stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
    return stamp_ns - (wall_ns - recv_ns) if stamp_ns else recv_ns


class Refusals:
    """counters: kind -> count, for `kinds` and whatever else the owner keeps in them."""

    def __init__(
        self, what: str, kinds: tuple[str, ...], counters: dict[str, int], verb: str = "refused"
    ):
        self.what, self.kinds, self.counters, self.verb = what, kinds, counters, verb
        counters.update(dict.fromkeys(kinds, 0))

    def __call__(self, kind: str, why: str) -> None:
        self.counters[kind] += 1
        if self.counters[kind] == 1:
            say(f"{self.verb} {self.what}: {why} (counted as {kind}; said once)")

    def refused(self) -> dict[str, int]:
        return {k: self.counters[k] for k in self.kinds}
