"""One robot a node serves: its waiting observation, previous chunk, budget, clock, counters.

A slot keeps the robot's newest waiting observation (latest-only per robot: a newer one from
the same robot supersedes it, another robot's never does), the first one not answered since
its last cycle (`since`: the deadline order ranks by it), its previous chunk (the
chunk-reuse drafter's input, so one robot's motion never drafts another's), its own budget,
its clock (another host's), the interval between its observations, when its last cycle
started, the level its next cycle runs at (the schedule sets it), the observation
period the node asks of it under overload (None: none asked), and, for a robot that takes
asks (its obs carry `open_loop_ns`), what its waiting observation's chunk will ask of it
(rtinfer.inference.horizon). Pure data; not thread-safe.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rtinfer.inference.budget import Budget, BudgetLevel
from rtinfer.inference.horizon import Grant
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import Envelope

ROBOT_COUNTERS = ("cycles", "obs_superseded", "obs_bad", "restarts", "obs_stale")


@dataclass
class RobotSlot:
    name: str
    budget: Budget
    clock: PeerClock | None
    waiting: Envelope | None = None  # the newest observation not yet answered
    since: Envelope | None = None  # the first one not answered since its last cycle
    previous: tuple | None = None  # its last chunk (Cycle.previous), drafts its next
    last_seq: int = -1
    last_seen_ns: int = 0
    slack_ns: int | None = None
    sent_ns: deque = field(default_factory=lambda: deque(maxlen=16))  # waypoint-0 publishes
    last_restart_ns: int | None = None  # when its seq last went back
    counters: dict = field(default_factory=lambda: dict.fromkeys(ROBOT_COUNTERS, 0))
    interval_ns: int | None = None  # between its observations (a running average)
    served_ns: int = 0  # its last cycle was started (or it was admitted)
    level_index: int = 0  # the budget level its next cycle runs at
    asked_period_ns: int | None = None  # the observation period asked of it (overload)
    queued_ns: int = 0  # its cycle's observation waited this long for others
    obs_deadline_ns: int = 0  # the waiting one's own (a committed prefix's window)
    # the asks of its latest observations' chunks (executed horizon, period), by seq
    grants: deque[Grant] = field(default_factory=lambda: deque(maxlen=4))

    @property
    def level(self) -> BudgetLevel:
        """The budget level its next cycle runs at (Schedule.next_batch chose it)."""
        return self.budget.levels[self.level_index]

    def heard(self, now_ns: int) -> None:
        """An observation arrived at now_ns: the interval's running average (1/8 new)."""
        if self.last_seen_ns and now_ns > self.last_seen_ns:
            gap = now_ns - self.last_seen_ns
            self.interval_ns = (
                gap
                if self.interval_ns is None
                else self.interval_ns + (gap - self.interval_ns) // 8
            )
        self.last_seen_ns = now_ns

    def due_ns(self, deadline_ns: int, env: Envelope | None = None) -> int | None:
        """When the chunk of env (default: the waiting observation) is due, on the node's
        clock: its capture moved onto it plus the deadline. While that is unknown (no
        capture stamp, or another host's clock not yet bracketed, as for a robot just placed
        here: the bracket needs its trace of a chunk) its arrival plus the deadline, a bound
        no earlier than the true due. None only for an envelope with neither."""
        env = self.waiting if env is None else env
        if env is None:
            return None
        capture = env.stamps.get("capture")
        offset = 0 if self.clock is None else self.clock.offset_ns
        if capture is not None and offset is not None:
            return capture - offset + deadline_ns
        recv = env.stamps.get("recv")
        return None if recv is None else recv + deadline_ns

    def rank_ns(self, deadline_ns: int) -> int | None:
        """The robot's place in the deadline order: the due of its first observation not
        answered since its last cycle (`since`), superseded or not. Ranked by its newest
        one, a robot whose observations are always superseded before they come first would
        be last for ever under overload (it starved); without overload the two agree."""
        return self.due_ns(deadline_ns, self.since)
