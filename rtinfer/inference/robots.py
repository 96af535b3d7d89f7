"""The robots one inference node serves: their slots, from joining to leaving.

Each robot (an obs `src`) that is admitted gets its own slot (rtinfer.inference.robot_slot).
`Robots` is the table and its lifecycle, assembled from parts that each own one concern:

- what an observation must be to be answered, floods, restarts: obs_checks.ObsChecks
- what a cycle costs, per batch size and budget level: cycle_cost.Costs
- who is admitted and who refused: admission.Admission
- which robots go next, at which level, and the observation rate asked: schedule.Schedule

A seq that goes backwards is a restarted robot: its previous chunk is forgotten and the
restart counted, so a restart reusing cycle ids is not taken for its old self. (A robot that
restarts before its old seq passed what the new one's first heard message carries is not
noticed: then only the drafter's first guess is the old chunk's, and speculation is
lossless. The controller keys chunks by (src, cycle, capture), so it never mixes the two
either way.) A robot silent for `leave_after_ns` leaves; its slot is freed.

Pure bookkeeping, no clock reads (every time is passed in); lines go to `say` (a
rtinfer.realtime.complaints.Complaints.say); not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.inference.admission import RETRY_NS, UTILISATION, Admission
from rtinfer.inference.budget import Budget
from rtinfer.inference.cycle_cost import MIN_TIMED, Costs, CycleCost
from rtinfer.inference.horizon import Grant, grant
from rtinfer.inference.obs_checks import ObsChecks
from rtinfer.inference.robot_slot import ROBOT_COUNTERS, RobotSlot
from rtinfer.inference.schedule import RULE, Schedule
from rtinfer.realtime.complaints import Complaints
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import Envelope

__all__ = [
    "Robots",
    "RobotSlot",
    "CycleCost",
    "UTILISATION",
    "RETRY_NS",
    "MIN_TIMED",
    "ROBOT_COUNTERS",
]


class Robots:
    def __init__(
        self,
        budget: Budget,
        *,
        remote: bool,
        max_robots: int | None = None,
        period_ns: int,
        leave_after_ns: int = 2_000_000_000,
        say: Callable[..., None] | None = None,
        rule: str = RULE,
        degrade: bool = True,
        start_ns: int | None = None,
    ):
        """budget: the first robot's Budget (later robots get budget.fresh()); remote:
        robots are on other hosts (each gets a PeerClock); max_robots: a cap on top of the
        measured capacity (None: none); period_ns: the policy's period, the rate each robot
        is planned at; say: where lines go, say(kind, text, error=True) (default: a
        Complaints of its own); rule, degrade: the schedule's (rtinfer.inference.schedule;
        rule="edf", degrade=False is the rule before overload degraded, for comparisons);
        start_ns: the policy's (when waypoint 0 is due after capture), with period_ns what
        an executed horizon is granted in (rtinfer.inference.horizon; None: no ask is made,
        as for a caller that sends no chunks)."""
        self.first_budget = budget  # the first robot's; later ones get budget.fresh()
        self._first_taken = False
        self.remote = remote
        self.period_ns, self.leave_after_ns = int(period_ns), int(leave_after_ns)
        self.start_ns = start_ns
        self.slots: dict[str, RobotSlot] = {}
        self.counters = dict.fromkeys(("robots_left", "slack_unknown"), 0)
        self.slack_ns: int | None = None  # the last answered cycle's slack (a gauge)
        self.say = say or Complaints("inference").say
        self.checks = ObsChecks(self.counters, self.say)
        self.cost_model = Costs(len(budget.levels))
        self.admission = Admission(
            self.cost_model, self.counters, self.say, max_robots, degrade, budget
        )
        self.schedule = Schedule(
            self.counters, self.say, rule=rule, degrade=degrade, utilisation=UTILISATION
        )

    # --- joining ------------------------------------------------------------------------------
    def offer(self, env: Envelope, now_ns: int, deadline_ns: int) -> RobotSlot | None:
        """An observation arrived: the robot's slot (the observation now waits there), or
        None (refused: its stamps, or admission). A refusal or a late admission is said. An
        admitted robot's observation granted an executed horizon is judged by its window
        (rtinfer.inference.horizon: its chunk is fresh that long), not the deadline."""
        name = env.src
        self.checks.count_arrival(name, now_ns, self.period_ns)
        slot = self.slots.get(name)
        g = None if slot is None else self._grant(slot, env, deadline_ns)
        if self.checks.bad_stamps(
            env,
            slot,
            self.remote,
            now_ns,
            deadline_ns if g is None else max(deadline_ns, g.window_ns),
        ):
            return None
        if slot is None:
            if not self.admission.admit(name, len(self.slots), now_ns, deadline_ns, self.period_ns):
                return None
            budget = self.first_budget.fresh() if self._first_taken else self.first_budget
            self._first_taken = True
            slot = self.slots[name] = RobotSlot(
                name, budget, PeerClock() if self.remote else None, served_ns=now_ns
            )
            self.schedule.plan(self.slots.values(), self.cost_model, self.period_ns)
        if env.seq <= slot.last_seq:  # a new publisher: the robot restarted
            self.checks.restarted(slot, env.seq, now_ns)
        slot.last_seq = env.seq
        slot.heard(now_ns)
        if slot.waiting is not None:
            slot.counters["obs_superseded"] += 1
        if g is None:  # a robot just admitted: its interval is not known before
            g = self._grant(slot, env, deadline_ns)
        if g is not None:  # answered until its window: its chunk is fresh that long
            slot.grants.append(g)
            deadline_ns = max(deadline_ns, g.window_ns)
        slot.waiting, slot.obs_deadline_ns = env, deadline_ns
        if slot.since is None:
            slot.since = env
        return slot

    def _grant(self, slot: RobotSlot, env: Envelope, deadline_ns: int):
        """What the chunk of env asks of its robot (rtinfer.inference.horizon), or None."""
        if self.start_ns is None or "open_loop_ns" not in env.body:
            return None
        load = self.schedule.load_level
        levels = slot.budget.levels[min(load, len(slot.budget.levels) - 1) :]
        return grant(
            env.seq,
            env.body["open_loop_ns"],
            asked_period_ns=slot.asked_period_ns,
            degraded=load > 0,
            interval_ns=slot.interval_ns,
            horizon=min(lv.chunk for lv in levels),  # the shortest it may send
            period_ns=self.period_ns,
            start_ns=self.start_ns,
            deadline_ns=deadline_ns,
        )

    def ask(self, dest: str, seq: int) -> Grant | None:
        """What robot dest's chunk answering observation seq asks of it (None: nothing)."""
        slot = self.slots.get(dest)
        return None if slot is None else next((g for g in slot.grants if g.seq == seq), None)

    # --- one cycle ----------------------------------------------------------------------------
    def next_batch(self, deadline_ns: int, now_ns: int, max_batch: int) -> list[RobotSlot]:
        """The waiting robots to answer together, each at its slot's `level` (Schedule):
        [] when none waits. The robots returned start waiting afresh."""
        return self.schedule.next_batch(
            self.slots, self.cost_model, deadline_ns, now_ns, max_batch, self.period_ns
        )

    def record_cost(self, batch: int, level: int, ns: int) -> None:
        """One batch of `batch` rows run at budget level `level` took ns."""
        self.cost_model.record(batch, level, ns)

    def answered(
        self,
        slot: RobotSlot,
        capture: int | None,
        last_publish_ns: int | None,
        *,
        window_ns: int = 0,
    ) -> None:
        """One of slot's cycles answered. Its slack, deadline - (last publish - capture) with
        capture on the node's clock and the deadline moved out to window_ns where a
        committed prefix keeps the chunk fresh that long after capture (real-time chunking,
        docs/wire.md) (the last waypoint: the controller rejects any waypoint past the
        deadline, so a chunk is on time only when its last one is), drives the robot's
        budget, less the time it queued behind others (the schedule's), and is the node's
        slack gauge; unknown (no capture, nothing sent, another host's clock not yet
        bracketed both ways: counted) it is not acted on."""
        slot.counters["cycles"] += 1
        if capture is None or last_publish_ns is None:
            return
        offset = 0 if slot.clock is None else slot.clock.offset_ns
        if offset is None:
            self.counters["slack_unknown"] += 1
            return
        self.slack_ns = slot.slack_ns = max(slot.budget.deadline_ns, window_ns) - (
            last_publish_ns - (capture - offset)
        )
        slot.budget.update(slot.slack_ns + slot.queued_ns)  # the queue is the schedule's

    # --- once a second ------------------------------------------------------------------------
    def check_load(self, deadline_ns: int) -> None:
        """Whether the robots admitted still fit (said on a change), and the level and
        observation rates the load needs (Schedule.plan)."""
        self.admission.check(len(self.slots), deadline_ns, self.period_ns)
        self.schedule.plan(self.slots.values(), self.cost_model, self.period_ns)

    def leave_idle(self, now_ns: int) -> list[str]:
        """Free the slots of robots silent for leave_after_ns; their names. A refused robot
        silent that long is forgotten too (a refused one still sending is checked again
        every RETRY_NS, which keeps it)."""
        gone = [
            n
            for n, s in self.slots.items()
            if s.waiting is None and now_ns - s.last_seen_ns > self.leave_after_ns
        ]
        for n in gone:
            del self.slots[n]
            self.counters["robots_left"] += 1
        self.admission.forget(now_ns, self.leave_after_ns)
        self.checks.forget(now_ns, self.leave_after_ns + 1_000_000_000)
        return gone

    @property
    def first_clock(self) -> PeerClock | None:
        """The first robot's clock (another host's; None on one host or before a robot)."""
        first = next(iter(self.slots.values()), None)
        return None if first is None else first.clock

    def figures(self) -> tuple[dict, dict]:
        """(counters, gauges in us) for the node's health: the robots' own, and per robot
        when there are several or one was refused."""
        slots = list(self.slots.values())
        c = {
            **self.counters,
            "robots": len(slots),
            "load_level": self.schedule.load_level,
            "obs_skipped": sum(s.counters["obs_superseded"] for s in slots),
            "robot_restarts": sum(s.counters["restarts"] for s in slots),
        }
        g = {}
        if self.slack_ns is not None:
            g["slack_us"] = self.slack_ns / 1e3
        offset = self.first_clock.offset_ns if self.first_clock is not None else None
        if offset is not None:
            g["robot_clock_offset_us"] = offset / 1e3
        if len(slots) > 1 or self.refused:
            for s in slots:
                c[f"robot.{s.name}.cycles"] = s.counters["cycles"]
                c[f"robot.{s.name}.budget_level"] = s.level_index
                c[f"robot.{s.name}.obs_stale"] = s.counters["obs_stale"]
                if s.slack_ns is not None:
                    g[f"robot.{s.name}.slack_us"] = s.slack_ns / 1e3
                if s.asked_period_ns is not None:
                    g[f"robot.{s.name}.obs_period_asked_us"] = s.asked_period_ns / 1e3
        for name in self.refused:  # refused and not admitted since (the dashboard)
            c[f"robot.{name}.refused"] = 1
        if self.fits is not None:  # the fleet controller places robots by it
            c["capacity"] = self.fits
        if self.admission.fits_full is not None:
            c["capacity_full"] = self.admission.fits_full
        if self.cycle_ns:
            g["cycle_cost_us"] = self.cycle_ns / 1e3
        for b in self.cost_model.batches[1:]:
            cost = self.batch_ns(b)
            if cost:
                g[f"batch_cost_us.b{b}"] = cost / 1e3
        return c, g

    # --- the parts' figures, as the node, the fleet and their tests read them -----------------
    refused = property(lambda self: self.admission.refused)
    overloaded = property(lambda self: self.admission.overloaded)
    fits = property(lambda self: self.admission.fits)
    max_robots = property(lambda self: self.admission.max_robots)
    costs = property(lambda self: self.cost_model.timed)
    profile = property(lambda self: self.cost_model.profile)
    batches = property(lambda self: self.cost_model.batches)
    cost = property(lambda self: self.cost_model.timed[1], doc="The single cycles timed.")
    cycle_ns = property(
        lambda self: self.cost_model.batch_ns(1),
        doc="The measured cost of one cycle (None: none timed yet).",
    )

    def set_batches(self, batches) -> None:
        self.cost_model.set_batches(batches)

    def set_profile(self, timed: dict[int, int]) -> None:
        self.cost_model.set_profile(timed)

    def batch_ns(self, b: int, median: bool = False) -> int | None:
        return self.cost_model.batch_ns(b, median)

    def delay_ns(self) -> int:
        return self.cost_model.delay_ns()

    def serve_ns(self, m: int, costs: dict | None = None) -> int | None:
        return self.cost_model.serve_ns(m, costs)

    def worst_ns(
        self, n: int, costs: dict | None = None, delay_ns: int | None = None
    ) -> int | None:
        """n robots' worst case at the level admission plans at (default costs)."""
        if costs is None:
            costs = self.cost_model.medians(self.admission.cheapest)
        return self.cost_model.worst_ns(n, costs, delay_ns)

    def capacity(self, deadline_ns: int) -> int | None:
        """How many robots fit at the cheapest budget level (admission.Admission)."""
        return self.admission.capacity(deadline_ns, self.period_ns)
