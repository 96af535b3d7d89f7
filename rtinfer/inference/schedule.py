"""Which robots a node answers next, at which budget level, and what it asks of them.

Each decision (`next_batch`) first drops what can no longer be answered in time, then orders
the robots waiting by the rule, then picks the first one's level and the robots batched
beside it:

- **Expire.** An observation already older than the deadline for every offset the clock
  estimate allows is dropped (its chunk could never be applied; counted `obs_stale`). The
  deadline is the node's, or the later one the node offered the observation with where a
  committed prefix keeps its chunk fresh longer (real-time chunking).
- **Order.** `RULE` (below) ranks the waiting robots.
- **Level.** The first robot runs at the level the offered load needs (`plan`) or its
  budget's (its own slack rule, the monitor's floor), whichever is cheaper; then cheaper
  still while its cycle would end past its deadline. One that would end late even at the
  cheapest level is dropped, counted `obs_stale` like one already too old (its chunk could
  never be applied in time), and the next robot in the order is tried: a cycle the robot
  would reject is never run, so it never makes the next robots late too. A fixed budget
  (`--no-budget`, `--level`) keeps its level: its cycle runs there or, would it end late,
  not at all.
- **Batch.** The others waiting whose budget allows that level join, in the rule's order,
  up to the largest batch, less the last while the batch would end after any member's due.

A robot's budget follows its slack less the time its observation queued behind other robots
(`queued_ns`): its own level answers a path too slow for the deadline, the schedule answers
a queue (shed on the queue's slack, every robot fell to the cheapest level at a load its
second level served in time).

The order was chosen by replaying the same arrivals through this code with each rule
(rtinfer.bench.overload; docs/benchmarks/overload.md): earliest-deadline-first (`edf`, by the
due of the first observation not answered since the robot's last cycle), least laxity (`llf`,
due less now less the cycle's cost), a wait-ratio rule as Kairos's (`wait`: the time since
the robot's last cycle over its staleness limit, the deadline plus its observation interval)
and EDF with that ratio as a guard (`guard`: a robot past GUARD of its limit first). With the
expiry and the level choice above, all four keep the same goodput; they differ in the worst
robot's service. Replayed on the conveyor policy's level costs with cycles 2-4x dearer than
profiled (a CPU-bound neighbour), 8-32 robots at 10-20 Hz, 20 s, two seeds: the worst
robot's longest gap over its staleness limit was 1.40 on average (at most 2.10) with `edf`,
1.70 (2.42) `guard`, 1.82 (3.26) `wait`, 89 (134) `llf` (it serves the robot with the least
time left, so a robot whose cycles fit later waits behind every other one). The five
phase-locked robots that starved under the old rule get 100-101 chunks in time each under
`edf`, `wait` and `guard` alike (tests/test_overload_replay.py). What fixed the starvation is
not the order: it is never running a cycle that would end late (EDF under overload serves
the most urgent observation, the one most likely to finish late, and the old rule ran it,
so the same phase-locked robot was late every time while the robots ahead of it were on
time) and the level and rate chosen for the load. `RULE` is "edf": as good as any on
goodput, the best worst-robot service measured, and optimal while the load fits.

`plan` (every PLAN_NS, and when a robot joins): the cheapest level whose offered load (each
robot's cycles per second at its interval, at most the policy's rate, priced as a batch of
them all) fits UTILISATION of the node's time, and, when not even the cheapest does, the
longer observation period each robot is asked for (its interval times the overload;
`asked_period_ns`, None otherwise; once asked, a robot keeps an ask until its period would
be the policy's or shorter).

The rule before this one, for same-run comparisons, is `Schedule(rule="edf", degrade=False)`: the
deadline order at each robot's own budget level, batching robots at the first one's level,
no drop of a cycle that would end late and no load level.

Pure bookkeeping, no clock reads; lines go to `say`; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rtinfer.inference.cycle_cost import Costs
from rtinfer.inference.robot_slot import RobotSlot

RULES = ("edf", "llf", "wait", "guard")
GUARD = 0.5  # "guard": a robot that waited this share of its staleness limit goes first
RULE = "edf"  # chosen by measurement: module doc
LATE = 1 << 62
PLAN_NS = 200_000_000  # plan() again at most this long after the last (a load that rises)


class Schedule:
    def __init__(
        self,
        counters: dict,
        say: Callable[..., None],
        *,
        rule: str = RULE,
        degrade: bool = True,
        utilisation: float = 0.8,
    ):
        """counters: the node's (obs_stale is counted there and per robot); rule: one of
        RULES; degrade: the load level, cheaper levels for a cycle that would end late, and
        the drop of one that would end late at every level (False: the rule before)."""
        if rule not in RULES:
            raise ValueError(f"rule {rule!r}: one of {', '.join(RULES)}")
        counters.setdefault("obs_stale", 0)
        self.counters, self.say, self.rule, self.degrade = counters, say, rule, degrade
        self.utilisation = utilisation
        self.load_level = 0  # the level the offered load needs (plan)
        self.planned_ns: int | None = None  # when next_batch last planned
        # robot -> its obs_superseded when its last observation was answered: the ones since
        # were replaced by a newer one before the node took them up
        self.superseded_seen: dict[str, int] = {}

    # --- once a second ----------------------------------------------------------------------
    def plan(self, slots: Iterable[RobotSlot], costs: Costs, period_ns: int) -> None:
        """The load level and the observation periods asked (module doc)."""
        slots = list(slots)
        names = {s.name for s in slots}
        for name in [n for n in self.superseded_seen if n not in names]:  # robots gone
            del self.superseded_seen[name]
        if not slots or not self.degrade or not costs.batch_ns(1):
            self.load_level = 0
            for s in slots:
                s.asked_period_ns = None
            return
        n, top = len(slots), len(slots[0].budget.levels) - 1
        # cycles per second, each robot at most the policy's rate: a robot that sends faster
        # (a burst catching up after a stall: 8 robots planned at 1,500/s) is answered its
        # newest observation at that rate, the rest superseded
        rate = sum(1e9 / max(s.interval_ns or period_ns, period_ns) for s in slots)
        need, fixed = 0.0, not slots[0].budget.auto  # a fixed budget: priced at its level
        for level in [slots[0].budget.index] if fixed else range(top + 1):
            serve = costs.serve_ns(n, costs.medians(level))
            need = rate * (serve or 0) / n / 1e9 / self.utilisation  # share of the node's time
            if need <= 1.0:
                break
        if level != self.load_level:
            old, self.load_level = self.load_level, level
            if not fixed:
                self.say(
                    "load_level",
                    f"load: {n} robots at {rate:.0f} observations/s need budget "
                    f"level {level} (was {old}) to fit {self.utilisation:.0%} of this "
                    f"node's time",
                    error=False,
                )
        # once asked, kept while the load needs it (a robot that honours it sends slower:
        # cleared at once, it oscillated)
        for s in slots:
            own = max(s.interval_ns or period_ns, period_ns)
            if need > 1.0 or s.asked_period_ns is not None:
                asked = int(own * need)
                s.asked_period_ns = asked if asked > period_ns else None

    # --- each decision ----------------------------------------------------------------------
    def next_batch(
        self,
        slots: dict[str, RobotSlot],
        costs: Costs,
        deadline_ns: int,
        now_ns: int,
        max_batch: int,
        period_ns: int,
    ) -> list[RobotSlot]:
        """The waiting robots to answer together, first in the rule's order first, each
        with its level_index set and its `since` cleared; [] when none waits (module doc).
        Plans again (plan) every PLAN_NS."""
        if self.degrade and (self.planned_ns is None or now_ns - self.planned_ns >= PLAN_NS):
            self.planned_ns = now_ns
            self.plan(slots.values(), costs, period_ns)
        self._expire(slots.values(), now_ns, deadline_ns, costs)
        waiting = [s for s in slots.values() if s.waiting is not None]
        if not waiting:
            return []
        order = sorted(waiting, key=lambda s: self._key(s, costs, deadline_ns, now_ns))
        if not self.degrade:
            return self._before(order, costs, deadline_ns, now_ns, max_batch)
        for first in order:
            level = self._level(first, costs, deadline_ns, now_ns)
            if level is not None:
                break
        else:
            return []
        batch = [first] + [s for s in order if s is not first and s.budget.index <= level][
            : max(0, max_batch - 1)
        ]
        while len(batch) > 1:
            cost = costs.batch_ns(next(b for b in costs.batches if b >= len(batch)), level=level)
            due = min(s.due_ns(_dl(s, deadline_ns)) or LATE for s in batch)
            if cost is None or now_ns + cost <= due:
                break
            batch.pop()
        for s in batch:
            s.since, s.level_index, s.served_ns = None, level, now_ns
            s.queued_ns = max(0, now_ns - s.waiting.stamps.get("recv", now_ns))
        self._tally(batch, costs)
        return batch

    def _key(self, s: RobotSlot, costs: Costs, deadline_ns: int, now_ns: int) -> tuple:
        deadline_ns = _dl(s, deadline_ns)
        rank = s.rank_ns(deadline_ns)
        rank = LATE if rank is None else rank
        if self.rule == "edf":
            return (rank,)
        if self.rule == "llf":
            due = s.due_ns(deadline_ns)
            cost = costs.batch_ns(1, median=True, level=self._start(s)) or 0
            return ((LATE if due is None else due) - now_ns - cost, rank)
        limit = deadline_ns + (s.asked_period_ns or s.interval_ns or deadline_ns)
        waited = (now_ns - s.served_ns) / limit  # of its staleness limit
        if self.rule == "wait":
            return (-waited, rank)
        return (0, -waited, rank) if waited >= GUARD else (1, rank, 0)  # "guard"

    def _start(self, s: RobotSlot) -> int:
        if not s.budget.auto:  # a fixed budget (--no-budget, --level) keeps its level
            return s.budget.index
        return min(max(self.load_level, s.budget.index), len(s.budget.levels) - 1)

    def _level(self, s: RobotSlot, costs: Costs, deadline_ns: int, now_ns: int) -> int | None:
        """The level s's cycle runs at: the load's or its budget's, cheaper while it would
        end past its due; None (dropped, counted) when it would at every level."""
        deadline_ns = _dl(s, deadline_ns)
        due, level = s.due_ns(deadline_ns), self._start(s)
        top = len(s.budget.levels) - 1 if s.budget.auto else level
        while True:
            cost = costs.batch_ns(1, median=True, level=level) or 0  # 0: none timed yet
            if due is None or now_ns + cost <= due:
                return level
            if level == top:
                break
            level += 1
        env, s.waiting = s.waiting, None
        self._missed(s, costs)
        self._stale(
            s,
            env.seq,
            (now_ns + cost - (due - deadline_ns)),
            deadline_ns,
            "would be by the end of its cycle even at the cheapest budget level",
        )
        return None

    def _before(
        self, order: list, costs: Costs, deadline_ns: int, now_ns: int, max_batch: int
    ) -> list[RobotSlot]:
        """The rule before (module doc): the first's own level, those at the same level."""
        first = order[0]
        level = first.budget.index
        batch = (
            [first]
            if max_batch <= 1
            else [s for s in order if s.budget.level == first.budget.level][:max_batch]
        )
        due = first.due_ns(deadline_ns)
        while len(batch) > 1 and due is not None:
            cost = costs.batch_ns(next(b for b in costs.batches if b >= len(batch)))
            if cost is None or now_ns + cost <= due:
                break
            batch.pop()
        for s in batch:
            s.since, s.level_index, s.served_ns = None, level, now_ns
        self._tally(batch, costs)
        return batch

    def _expire(
        self, slots: Iterable[RobotSlot], now_ns: int, deadline_ns: int, costs: Costs
    ) -> None:
        """Drop the waiting observations already older than the deadline for every offset
        the clock estimate allows (their arrival stands in for a capture not yet movable);
        each is tallied in `costs` as missed (admission's check reads the share)."""
        for slot in slots:
            env = slot.waiting
            if env is None:
                continue
            capture, bounds = env.stamps.get("capture"), (0, 0)
            if slot.clock is not None:
                bounds = slot.clock.bounds()
            if capture is None or bounds is None or bounds[0] > bounds[1]:
                capture, bounds = env.stamps.get("recv"), (0, 0)
            age_ns = None if capture is None else now_ns - (capture - bounds[0])
            if age_ns is None or age_ns <= _dl(slot, deadline_ns):
                continue
            slot.waiting = None
            self._missed(slot, costs)
            self._stale(slot, env.seq, age_ns, deadline_ns, "waited past it")

    def _tally(self, batch: list[RobotSlot], costs: Costs) -> None:
        """The observations answered, and those each robot sent since its last answered one
        that a newer one replaced before the node took them up (missed: its slot's
        obs_superseded; the expired ones were tallied as they expired), into `costs` for
        admission's check. Not the gaps in the envelopes' seq: a robot's publisher numbers
        its traces, health and heartbeats too (a robot sending a trace a cycle would read as
        half its observations missed)."""
        for s in batch:
            now, last = s.counters["obs_superseded"], self.superseded_seen.get(s.name)
            if last is not None and now > last:
                costs.served(missed=now - last)
            self.superseded_seen[s.name] = now
        costs.served(answered=len(batch))

    def _missed(self, slot: RobotSlot, costs: Costs) -> None:
        costs.served(missed=1)

    def _stale(self, slot: RobotSlot, seq: int, age_ns: int, deadline_ns: int, how: str) -> None:
        """One observation not answered: it was, or would be, older than the deadline."""
        self.counters["obs_stale"] += 1
        slot.counters["obs_stale"] += 1
        name = slot.name
        self.say(
            f"obs_stale.{name}",
            lambda: (
                f"observation {seq} from {name!r} is {age_ns / 1e6:.1f} ms old against the "
                f"{deadline_ns / 1e6:g} ms deadline ({how}): not answered (obs_stale); the node "
                f"is overloaded: lower the load, or serve some robots from another node"
            ),
        )


def _dl(s: RobotSlot, deadline_ns: int) -> int:
    """The deadline of s's waiting observation: the node's, or later where a committed
    prefix keeps its chunk fresh longer (the deadline the node offered it with)."""
    return max(deadline_ns, s.obs_deadline_ns)
