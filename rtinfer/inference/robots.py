"""The robots one inference node serves: per-robot state, admission, and which goes next.

Each robot (an obs `src`) that is admitted gets its own slot: its newest waiting observation
(latest-only per robot: a newer one from the same robot supersedes it, another robot's never
does), its previous chunk (the chunk-reuse drafter's input, so one robot's motion never
drafts another's), its own budget level, its clock (another host's), its counters, and the
seq of its last observation. A seq that goes backwards is a restarted robot (its publisher
is new and counts from 0): its previous chunk is forgotten and the restart counted, so a
restart reusing cycle ids is not taken for its old self. (A robot that restarts before its
old seq passed what the new one's first heard message carries is not noticed: then only the
drafter's first guess is the old chunk's, and speculation is lossless. The controller keys
chunks by (src, cycle, capture), so it never mixes the two either way.) A robot silent for `leave_after_ns` leaves; its slot is
freed.

Admission: the node serves one cycle at a time, earliest deadline first, so n robots at the
policy's rate fit while n * chunk_time <= UTILISATION * min(deadline, period). A robot
joining beyond that is refused, said once on stderr with what load would fit, and counted
(robots_refused); its observations are counted (obs_refused) and never answered, so it is
never admitted and then served late in silence. A refused robot that keeps sending is
checked again once every RETRY_NS: when the load has fallen enough it is admitted, and that
is said too (robots_admitted_late). `chunk_ns` is measured by the node (a
profile of its own cycles; see InferenceNode). Pure bookkeeping, no clock reads; not
thread-safe.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rtinfer.inference.budget import Budget
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.heartbeat import PeerClock
from rtinfer.transport.wire import Envelope

UTILISATION = 0.8  # the share of the window admission plans to use: the rest absorbs jitter
RETRY_NS = 1_000_000_000  # how often a refused robot that keeps sending is checked again
ROBOT_COUNTERS = ("cycles", "obs_superseded", "obs_bad", "restarts")


class CycleCost:
    """The cost of one cycle at the current load: the p99 of the last `window` to
    2 * `window` cycles timed (two hdr histograms, the older dropped when the newer fills),
    so a slow start-up ages out instead of capping admission for good. record() is O(1);
    the percentile (a pass over the counts, ~1.5 ms) is taken only when asked for, at
    admission and health, and kept until the next record."""

    def __init__(self, window: int = 64):
        self.window = window
        self._old, self._new = LatencyHistogram(), LatencyHistogram()
        self._both = LatencyHistogram()  # scratch for the union, allocated once
        self._p99: int | None = None     # the last p99_ns(), until the next record()
        self._fresh = True

    def record(self, ns: int) -> None:
        if self._new.count >= self.window:
            self._old, self._new = self._new, self._old
            self._new.reset()
        self._new.record(ns)
        self._fresh = False

    @property
    def count(self) -> int:
        return self._old.count + self._new.count

    def p99_ns(self) -> int | None:
        if not self._fresh:
            both = self._both
            both.reset()
            both.merge(self._old)
            both.merge(self._new)
            self._p99, self._fresh = int(both.percentiles_us()["p99"] * 1000), True
        return self._p99


@dataclass
class RobotSlot:
    name: str
    budget: Budget
    clock: PeerClock | None
    waiting: Envelope | None = None     # the newest observation not yet answered
    previous: tuple | None = None       # the runner's previous chunk for this robot
    last_seq: int = -1
    last_seen_ns: int = 0
    slack_ns: int | None = None
    sent_ns: deque = field(default_factory=lambda: deque(maxlen=16))  # waypoint-0 publishes
    counters: dict = field(default_factory=lambda: dict.fromkeys(ROBOT_COUNTERS, 0))

    def due_ns(self, deadline_ns: int) -> int | None:
        """When the waiting observation's chunk is due, on the node's clock (None: unknown,
        e.g. another host's clock not yet bracketed; such a robot goes last)."""
        env = self.waiting
        capture = env.stamps.get("capture") if env is not None else None
        if capture is None:
            return None
        offset = 0 if self.clock is None else self.clock.offset_ns
        return None if offset is None else capture - offset + deadline_ns


class Robots:
    def __init__(self, budget: Budget, *, remote: bool, max_robots: int | None = None,
                 period_ns: int, leave_after_ns: int = 2_000_000_000):
        """budget: the first robot's Budget (later robots get budget.fresh()); remote:
        robots are on other hosts (each gets a PeerClock); max_robots: a cap on top of the
        measured capacity (None: none); period_ns: the policy's period, the rate each robot
        is planned at."""
        self.first_budget = budget  # the first robot's; later ones get budget.fresh()
        self._first_taken = False
        self.remote, self.max_robots = remote, max_robots
        self.period_ns, self.leave_after_ns = int(period_ns), int(leave_after_ns)
        self.slots: dict[str, RobotSlot] = {}
        self.refused: dict[str, int] = {}   # robot -> when it was last checked (ns)
        self.counters = dict.fromkeys(("robots_refused", "robots_admitted_late", "robots_left",
                                       "obs_refused"), 0)
        self.cost = CycleCost()             # cycles timed: the node records them
        self.said: list[tuple[str, bool]] = []  # lines for the caller to print: (text, error)

    @property
    def chunk_ns(self) -> int | None:
        """The measured cost of one cycle (None: none timed yet); see capacity."""
        return self.cost.p99_ns()

    def capacity(self, deadline_ns: int) -> int | None:
        """How many robots fit at the policy's rate (None: no measurement yet)."""
        cost = self.chunk_ns
        if not cost:
            return None
        window = min(deadline_ns, self.period_ns)
        return max(1, int(UTILISATION * window // cost))

    def offer(self, env: Envelope, now_ns: int, deadline_ns: int) -> RobotSlot | None:
        """An observation arrived: the robot's slot (the observation now waits there), or
        None (refused). A refusal or a late admission also appends its line to `said`, as
        (text, is_error), for the caller to print once."""
        name = env.src
        slot = self.slots.get(name)
        if slot is None:
            checked = self.refused.get(name)
            if checked is not None and now_ns - checked < RETRY_NS:
                self.counters["obs_refused"] += 1
                return None
            why = self._refusal(name, deadline_ns)
            if why is not None:
                if checked is None:
                    self.counters["robots_refused"] += 1
                self.refused[name] = now_ns
                self.counters["obs_refused"] += 1
                if checked is None:
                    self.said.append((why, True))
                return None
            if checked is not None:
                del self.refused[name]
                self.counters["robots_admitted_late"] += 1
                self.said.append((f"robot {name!r} admitted: the load has fallen to what "
                                  f"{len(self.slots) + 1} robots fit", False))
            budget = self.first_budget.fresh() if self._first_taken else self.first_budget
            self._first_taken = True
            slot = self.slots[name] = RobotSlot(name, budget, PeerClock() if self.remote else None)
        if env.seq <= slot.last_seq:  # a new publisher: the robot restarted
            slot.counters["restarts"] += 1
            slot.previous = None
        slot.last_seq, slot.last_seen_ns = env.seq, now_ns
        if slot.waiting is not None:
            slot.counters["obs_superseded"] += 1
        slot.waiting = env
        return slot

    def _refusal(self, name: str, deadline_ns: int) -> str | None:
        n = len(self.slots)
        if self.max_robots is not None and n >= self.max_robots:
            return (f"robot {name!r} refused: this node serves at most {self.max_robots} "
                    f"robots (--max-robots); start another node for it")
        cap = self.capacity(deadline_ns)
        if cap is not None and n >= cap:
            per = self.chunk_ns / 1e6
            window = min(deadline_ns, self.period_ns) / 1e6
            return (f"robot {name!r} refused: {n + 1} robots at {1e9 / self.period_ns:.3g} Hz "
                    f"need {(n + 1) * per:.1f} ms of {UTILISATION * window:.1f} ms per "
                    f"{window:.1f} ms window (one cycle measured at {per:.1f} ms); this node fits "
                    f"{cap}: serve it from another node, or lower the policy rate or the "
                    f"model's cost")
        return None

    def next(self, deadline_ns: int) -> RobotSlot | None:
        """The waiting robot whose chunk is due first (earliest deadline first); its
        observation is handed out (slot.waiting cleared by the caller's take)."""
        best, best_due = None, None
        for slot in self.slots.values():
            if slot.waiting is None:
                continue
            due = slot.due_ns(deadline_ns)
            if best is None or (due is not None and (best_due is None or due < best_due)):
                best, best_due = slot, due
        return best

    def leave_idle(self, now_ns: int) -> list[str]:
        """Free the slots of robots silent for leave_after_ns; their names."""
        gone = [n for n, s in self.slots.items()
                if s.waiting is None and now_ns - s.last_seen_ns > self.leave_after_ns]
        for n in gone:
            del self.slots[n]
            self.counters["robots_left"] += 1
        return gone
