"""Which node's chunks a robot takes when more than one sends it chunks: the node it took
last, until that node has been silent for quiet_ns (a chunk interval and the deadline: when
the robot's watchdog holds anyway). Two nodes serve one robot only for a while (a fleet
partition: the cut-off node keeps serving, the controller places the robot elsewhere); taking
one stream keeps the robot from restarting its chunk at each of the other's waypoints.

The other node's waypoints are counted (`chunks_other_source`: waypoint messages) and not
taken; a change of node is counted (`source_switches`). The C++ client's
include/rtinfer/one_source.hpp is the same rule under the same names."""

from __future__ import annotations


class OneSource:
    """Times in ns, passed in; not thread-safe. `counters`: the dict to count into (the
    robot's health counters), a new one by default."""

    def __init__(self, quiet_ns: int, counters: dict | None = None) -> None:
        self.quiet_ns = int(quiet_ns)
        self.src: str | None = None
        self.last_ns = 0
        self.counters = {} if counters is None else counters
        self.counters.setdefault("chunks_other_source", 0)
        self.counters.setdefault("source_switches", 0)

    def take(self, src: str, now_ns: int) -> bool:
        """True: take this waypoint from `src` (and follow it from now on)."""
        if src != self.src:
            if self.src is not None and now_ns - self.last_ns <= self.quiet_ns:
                self.counters["chunks_other_source"] += 1
                return False
            self.counters["source_switches"] += self.src is not None
            self.src = src
        self.last_ns = now_ns
        return True
