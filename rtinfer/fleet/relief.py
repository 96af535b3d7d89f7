"""Relieving an overloaded host: which robots move off it, where, and when. No Ray, no
socket, no clock read: the caller passes the time (s, any monotonic origin), so every
decision replays in a test.

- A host's **steady capacity** is the median of its capacity figures (the least of its
  declared and its node's measured `capacity`, as polled) over the last STEADY_S. The
  node's figure swings 2x from one second to the next on a loaded machine; a median over
  several seconds follows a lasting change and ignores a busy second.
- A host is **overloaded** while its steady capacity is below the robots placed on it; it
  is **relieved** once it has been overloaded for HYSTERESIS_S without a break: robots move
  off it until its load is its steady capacity, each to the host of its model with the most
  steady room (none: it stays, its node degrades and serves it), never to a host whose node
  refused it. After a relief the host's clock starts again: its node measures its new load
  before anything more moves.
- **No robot moves more than once in MOVE_EVERY_S**, for any reason the controller records
  (relief, balance); a host lost still moves its robots at once (they have no node). The
  robots moved last by name go first (as balance takes them).
"""
from __future__ import annotations

import statistics
from collections import deque

from rtinfer.fleet.placement import Seat
from rtinfer.fleet.spec import Robot

STEADY_S = 4.0       # the window of a host's steady capacity (its median)
HYSTERESIS_S = 3.0   # overloaded this long without a break: relieved
MOVE_EVERY_S = 60.0  # the least time between two moves of one robot


class Relief:
    """The controller's memory for relief: each host's recent capacity figures and since
    when it has been overloaded, each robot's last move. Not thread-safe (the controller
    holds its lock)."""

    def __init__(self, steady_s: float = STEADY_S, hysteresis_s: float = HYSTERESIS_S,
                 move_every_s: float = MOVE_EVERY_S) -> None:
        self.steady_s, self.hysteresis_s, self.move_every_s = steady_s, hysteresis_s, move_every_s
        self.seen: dict[str, deque] = {}          # host -> (t, capacity) of the last steady_s
        self.over_since: dict[str, float] = {}    # host -> when it became overloaded
        self.moved_at: dict[str, float] = {}      # robot -> when it last moved

    def note(self, host: str, t: float, capacity: int | None) -> None:
        """A poll of `host`: its capacity figure now (None: not measured; not counted)."""
        seen = self.seen.setdefault(host, deque())
        if capacity is not None:
            seen.append((t, capacity))
        while seen and t - seen[0][0] > self.steady_s:
            seen.popleft()

    def forget(self, host: str) -> None:
        """A host lost: its figures go with it (a node started again measures anew)."""
        self.seen.pop(host, None)
        self.over_since.pop(host, None)

    def steady(self, host: str) -> int | None:
        """Its steady capacity (module doc), rounded down; None before any figure."""
        seen = self.seen.get(host)
        return int(statistics.median(c for _, c in seen)) if seen else None

    def moved(self, robot: str, t: float) -> None:
        self.moved_at[robot] = t

    def settled(self, t: float) -> frozenset[str]:
        """The robots that moved in the last move_every_s: none of them moves again yet."""
        return frozenset(r for r, when in self.moved_at.items() if t - when < self.move_every_s)

    def moves(self, t: float, robots: dict[str, Robot], seats: dict[str, Seat],
              placed: dict[str, str]) -> dict[str, str]:
        """robot -> its new host for every robot to move now (module doc); {} mostly.
        Updates when each host became overloaded."""
        load = {s.name: 0 for s in seats.values() if s.up}
        for h in placed.values():
            if h in load:
                load[h] += 1
        steady = {h: self.steady(h) for h in load}
        for h in load:
            if steady[h] is not None and load[h] > steady[h]:
                self.over_since.setdefault(h, t)
            else:
                self.over_since.pop(h, None)
        for h in [h for h in self.over_since if h not in load]:
            del self.over_since[h]
        settled, out = self.settled(t), {}
        for h in sorted(h for h, since in self.over_since.items()
                        if t - since >= self.hysteresis_s):
            movable = sorted((r for r, x in placed.items()
                              if x == h and r in robots and r not in settled), reverse=True)
            for r in movable:
                if load[h] <= steady[h]:
                    break
                to = [s for s in seats.values() if s.up and s.name != h
                      and s.model == robots[r].model and r not in s.refused
                      and steady.get(s.name) is not None and steady[s.name] - load[s.name] > 0]
                if not to:
                    continue
                best = max(to, key=lambda s: (steady[s.name] - load[s.name],
                                              [-ord(c) for c in s.name]))
                out[r] = best.name
                load[h] -= 1
                load[best.name] += 1
            if any(placed[r] == h for r in out):
                del self.over_since[h]  # its node measures its new load first
        return out
