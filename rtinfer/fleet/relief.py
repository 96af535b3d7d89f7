"""Relieving an overloaded host: which robots move off it, where, and when. No Ray, no
socket, no clock read: the caller passes the time (s, any monotonic origin), so every
decision replays in a test.

- A host's figures are its capacity figures as polled (the least of its declared and its
  node's measured `capacity`) over the last WINDOW_S. Its **steady capacity** is their
  median, rounded down: where robots may go, and how many stay.
- A host is **overloaded** once, over a whole window, its load (the robots placed on it)
  was above its figure in at least OVER_SHARE of its polls. That is the hysteresis: the
  node's figure swings 2x from one second to the next on a loaded machine, and a busy
  second (or two in three) is below the share, while a lasting fall is acted on
  OVER_SHARE * WINDOW_S after it (the rule before, a 4 s median that then had to stay
  below the load for 3 s, took 5 s and more after the figure fell).
- An overloaded host is **relieved** at once: robots move off it until its load is its
  steady capacity, each to the host of its model with the most steady room (none: it
  stays, its node degrades and serves it), never to a host whose node refused it. After a
  relief only the figures polled since count for that host's overload: its node measures
  its new load over a whole window before anything more moves.
- **No robot moves more than once in MOVE_EVERY_S**, for any reason the controller records
  (relief, balance); a host lost still moves its robots at once (they have no node). The
  robots moved last by name go first (as balance takes them).
"""

from __future__ import annotations

import statistics
from collections import deque

from rtinfer.fleet.placement import Seat
from rtinfer.fleet.spec import Robot

WINDOW_S = 3.0  # the window of a host's figures (its steady capacity, its overload)
OVER_SHARE = 0.75  # the share of a window's polls over capacity that is an overload
MOVE_EVERY_S = 60.0  # the least time between two moves of one robot
# why a robot moved, the last words of the controller's event for it: a host lost (the
# robot has no node: it moves at once), its node's refusal, a relief, a balance
MOVE_CAUSES = ("host lost", "its node refused it", "relief", "balance")


class Relief:
    """The controller's memory for relief: each host's figures of the last window and since
    when they count, each robot's last move. Not thread-safe (the controller holds its
    lock)."""

    def __init__(
        self,
        window_s: float = WINDOW_S,
        over_share: float = OVER_SHARE,
        move_every_s: float = MOVE_EVERY_S,
    ) -> None:
        self.window_s, self.over_share, self.move_every_s = window_s, over_share, move_every_s
        self.seen: dict[str, deque] = {}  # host -> (t, capacity) of the last window_s
        self.counted_from: dict[str, float] = {}  # host -> its first figure that counts (its
        # first, or the first after its last relief) for its overload
        self.moved_at: dict[str, float] = {}  # robot -> when it last moved
        self.why: dict[str, tuple] = {}  # host relieved last -> (share, steady, load)

    def note(self, host: str, t: float, capacity: int | None) -> None:
        """A poll of `host`: its capacity figure now (None: not measured; not counted)."""
        seen = self.seen.setdefault(host, deque())
        if capacity is not None:
            seen.append((t, capacity))
            self.counted_from.setdefault(host, t)
        while seen and t - seen[0][0] > self.window_s:
            seen.popleft()

    def forget(self, host: str) -> None:
        """A host lost: its figures go with it (a node started again measures anew)."""
        self.seen.pop(host, None)
        self.counted_from.pop(host, None)

    def steady(self, host: str) -> int | None:
        """Its steady capacity (module doc), rounded down; None before any figure."""
        seen = self.seen.get(host)
        return int(statistics.median(c for _, c in seen)) if seen else None

    def over(self, host: str, t: float, load: int) -> float | None:
        """The share of `host`'s figures in the window below `load`; None until its figures
        span a whole window."""
        seen, since = self.seen.get(host), self.counted_from.get(host)
        if not seen or since is None or t - since < self.window_s:
            return None
        counted = [c for when, c in seen if when >= since]
        return sum(c < load for c in counted) / len(counted) if counted else None

    def overloaded(self, host: str, t: float, load: int) -> bool:
        share = self.over(host, t, load)
        return share is not None and share >= self.over_share

    def moved(self, robot: str, t: float) -> None:
        self.moved_at[robot] = t

    def settled(self, t: float) -> frozenset[str]:
        """The robots that moved in the last move_every_s: none of them moves again yet."""
        return frozenset(r for r, when in self.moved_at.items() if t - when < self.move_every_s)

    def moves(
        self, t: float, robots: dict[str, Robot], seats: dict[str, Seat], placed: dict[str, str]
    ) -> dict[str, str]:
        """robot -> its new host for every robot to move now (module doc); {} mostly. A host
        relieved starts its window again."""
        load = {s.name: 0 for s in seats.values() if s.up}
        for h in placed.values():
            if h in load:
                load[h] += 1
        steady = {h: self.steady(h) for h in load}
        settled, out = self.settled(t), {}
        for h in sorted(h for h in load if self.overloaded(h, t, load[h])):
            self.why[h] = (self.over(h, t, load[h]), steady[h], load[h])
            movable = sorted(
                (r for r, x in placed.items() if x == h and r in robots and r not in settled),
                reverse=True,
            )
            for r in movable:
                if load[h] <= steady[h]:
                    break
                to = [
                    s
                    for s in seats.values()
                    if s.up
                    and s.name != h
                    and s.model == robots[r].model
                    and r not in s.refused
                    and steady.get(s.name) is not None
                    and steady[s.name] - load[s.name] > 0
                ]
                if not to:
                    continue
                best = max(
                    to, key=lambda s: (steady[s.name] - load[s.name], [-ord(c) for c in s.name])
                )
                out[r] = best.name
                load[h] -= 1
                load[best.name] += 1
            if any(placed[r] == h for r in out):  # its node measures its new load first
                self.counted_from[h] = t + 1e-9
        return out
