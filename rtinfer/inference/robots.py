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

Admission: the node serves one batch at a time, earliest deadline first. A robot whose
observation arrives just after a batch started waits for it, then is served with the robots
that arrived meanwhile: with serve(m) the cost of answering m robots (in batches of at most
the largest batch; m cycles one by one when the node does not batch), n robots at the
policy's rate fit while the worst case, max(serve(n), serve(a) + serve(n - a) for
0 < a < n) at the typical (median) costs plus one delay (the largest p99 less median of a
batch size timed: a preemption, which a busy host inflicts on some cycles of a window, not
on all of them), is <= UTILISATION * min(deadline, period). Without batching that is
n * median cycle + (p99 - median). (Planned at n * p99, a 2-core host under load, where the
tiny model's median is a few ms and its p99 10-40 ms of preemption, fitted 1 or 2 robots a
node and refused most robots a fleet moved.) A robot
joining beyond that is refused, said once on stderr with what load would fit, and counted
(robots_refused); its observations are counted (obs_refused) and never answered, so it is
never admitted and then served late in silence. A refused robot that keeps sending is
checked again once every RETRY_NS: when the load has fallen enough it is admitted, and that
is said too (robots_admitted_late). When the load rises after admission so that the robots
already admitted no longer fit (`check_load`, once a second), that is said once and counted
(overloads), and said again when they fit once more: their cycles may then be late, and
every late one is counted by the monitor and the robot's controller, never silent. The
costs are measured by the node: per batch size, the median and p99 of its recent batches of
that size (`costs`), else a start-up profile of each batch size (`profile`, the latency
table) scaled by what the batch-1 cycles measured against their own profile. `next_batch` takes the waiting robots in deadline order at the first one's budget
level (one exit depth per batch), as many as the largest batch holds, and drops the least
urgent while the batch would finish after the first one's deadline. The deadline order ranks
a robot by its first observation not answered since its last cycle (RobotSlot.rank_ns), so
under overload supersession never keeps one robot last for ever; an observation that waited
past the deadline is dropped before it could be answered late (obs_stale).

What an observation must be to be answered (docs/wire.md section 5, "What a policy node
answers"): its capture, moved onto the node's clock, is neither older than the deadline (its chunk
could never be applied in time; `obs_stale`) nor ahead of the observation's arrival by more
than the clock estimate allows (nothing on one host; across hosts the bracket's width: a
stamp from the future makes a chunk look fresh for longer than it is; `obs_future`), and no
later than its own `publish` stamp (`obs_stamps_disordered`). Such an observation is refused
before it can join, supersede or win the deadline order, counted, and said once a second per
robot. A robot whose observations come faster than FLOOD_FACTOR times the policy rate is
said to flood (`obs_floods`, once a second): only its newest observation is ever answered,
so a flood costs the node the decoding, never a queue. A seq that goes back again within
SEQ_JUMP_WINDOW_NS of the last time is two processes publishing under one name, not
restarts (`obs_seq_jumps`), said with the fix.

Pure bookkeeping, no clock reads (every time is passed in); lines go to `say` (a
rtinfer.realtime.complaints.Complaints.say); not thread-safe.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from rtinfer.inference.budget import Budget
from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import Envelope

UTILISATION = 0.8  # the share of the window admission plans to use: the rest absorbs jitter
MIN_TIMED = 16     # batches of one size timed before their figures replace the profile
RETRY_NS = 1_000_000_000  # how often a refused robot that keeps sending is checked again
MAX_ROBOTS = 4096  # the most robots capacity() ever reports
FLOOD_FACTOR = 4   # observations per second over this times the policy rate: a flood
SEQ_JUMP_WINDOW_NS = 5_000_000_000  # a seq back again within this: two publishers, one name
ROBOT_COUNTERS = ("cycles", "obs_superseded", "obs_bad", "restarts", "obs_stale")


class CycleCost:
    """The cost of one cycle at the current load: the median and p99 of the last `window`
    to 2 * `window` cycles timed (two hdr histograms, the older dropped when the newer
    fills), so a slow start-up ages out instead of capping admission for good. record() is
    O(1); the percentiles (one cumsum over the counts, ~0.1 ms) are taken only when asked
    for, at admission and health, and kept until the next record."""

    def __init__(self, window: int = 64):
        self.window = window
        self._old, self._new = LatencyHistogram(), LatencyHistogram()
        self._both = LatencyHistogram()  # scratch for the union, allocated once
        self._p50 = self._p99 = None     # the last percentiles (ns), until the next record()
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

    def _refresh(self) -> None:
        if not self._fresh:
            both = self._both
            both.reset()
            both.merge(self._old)
            both.merge(self._new)
            pct = both.percentiles_us()
            self._p50, self._p99 = int(pct["p50"] * 1000), int(pct["p99"] * 1000)
            self._fresh = True

    def p99_ns(self) -> int | None:
        self._refresh()
        return self._p99

    def p50_ns(self) -> int | None:
        self._refresh()
        return self._p50


@dataclass
class RobotSlot:
    name: str
    budget: Budget
    clock: PeerClock | None
    waiting: Envelope | None = None     # the newest observation not yet answered
    since: Envelope | None = None       # the first one not answered since its last cycle
    previous: tuple | None = None       # its last chunk (Cycle.previous), drafts its next
    last_seq: int = -1
    last_seen_ns: int = 0
    slack_ns: int | None = None
    sent_ns: deque = field(default_factory=lambda: deque(maxlen=16))  # waypoint-0 publishes
    last_restart_ns: int | None = None  # when its seq last went back
    counters: dict = field(default_factory=lambda: dict.fromkeys(ROBOT_COUNTERS, 0))

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


class Robots:
    def __init__(self, budget: Budget, *, remote: bool, max_robots: int | None = None,
                 period_ns: int, leave_after_ns: int = 2_000_000_000,
                 say: Callable[..., None] | None = None):
        """budget: the first robot's Budget (later robots get budget.fresh()); remote:
        robots are on other hosts (each gets a PeerClock); max_robots: a cap on top of the
        measured capacity (None: none); period_ns: the policy's period, the rate each robot
        is planned at; say: where lines go, say(kind, text, error=True) (default: a
        Complaints of its own)."""
        self.first_budget = budget  # the first robot's; later ones get budget.fresh()
        self._first_taken = False
        self.remote, self.max_robots = remote, max_robots
        self.period_ns, self.leave_after_ns = int(period_ns), int(leave_after_ns)
        self.slots: dict[str, RobotSlot] = {}
        self.refused: dict[str, int] = {}   # robot -> when it was last checked (ns)
        self.counters = dict.fromkeys(("robots_refused", "robots_admitted_late", "robots_left",
                                       "obs_refused", "overloads", "slack_unknown",
                                       "obs_stale", "obs_future", "obs_stamps_disordered",
                                       "obs_floods", "obs_seq_jumps", "frame_stale",
                                       "frame_future"), 0)
        self.slack_ns: int | None = None    # the last answered cycle's slack (a gauge)
        self.overloaded = False             # the admitted robots no longer fit (check_load)
        self.fits: int | None = None        # how many robots fit, as check_load last found
        self.batches = [1]                  # the batch sizes the node runs (set by the node)
        self.costs = {1: CycleCost()}       # batch size -> batches timed (the node records)
        self.profile: dict[int, int] = {}   # batch size -> its start-up profile, ns
        self.say = say or Complaints("inference").say
        self.arrivals: dict[str, list[int]] = {}  # src -> [start of its second, obs in it]

    def set_batches(self, batches) -> None:
        self.batches = sorted({1, *batches})
        for b in self.batches:
            self.costs.setdefault(b, CycleCost())

    @property
    def cost(self) -> CycleCost:
        """The single cycles timed."""
        return self.costs[1]

    @property
    def cycle_ns(self) -> int | None:
        """The measured cost of one cycle (None: none timed yet); see capacity."""
        return self.batch_ns(1)

    def batch_ns(self, b: int, median: bool = False) -> int | None:
        """The cost of one batch of b robots (b an exported batch size): its measured p99
        (median: its median) once MIN_TIMED were timed (any count for b = 1), else its
        profile scaled by batch 1's measured-over-profiled ratio; None when neither is
        known."""
        timed = self.costs.get(b)
        if timed is not None and timed.count >= (1 if b == 1 else MIN_TIMED):
            return timed.p50_ns() if median else timed.p99_ns()
        prior = self.profile.get(b)
        if prior is None:
            return None
        one = None
        if self.cost.count:
            one = self.cost.p50_ns() if median else self.cost.p99_ns()
        one_prior = self.profile.get(1)
        return int(prior * one / one_prior) if one and one_prior else prior

    def delay_ns(self) -> int:
        """The one delay a window is planned to absorb: the largest p99 less median among
        the batch sizes timed (a preemption, which a busy host inflicts on some cycles, not
        on every cycle of a window); 0 before any was timed."""
        return max((c.p99_ns() - c.p50_ns() for b, c in self.costs.items()
                    if c.count >= (1 if b == 1 else MIN_TIMED)), default=0)

    def set_profile(self, timed: dict[int, int]) -> None:
        """The start-up latency table (batch size -> ns). A batched graph's cost grows with
        its batch, so a batched size timed above a larger one was noise (a preemption during
        its rounds): it is lowered to the larger one's figure."""
        self.profile.update(timed)
        low = None
        for b in sorted((b for b in self.profile if b > 1), reverse=True):
            low = self.profile[b] if low is None else min(low, self.profile[b])
            self.profile[b] = low

    def _costs(self) -> dict[int, int | None]:
        """Per batch size, the typical (median) cost that admission plans with."""
        return {b: self.batch_ns(b, median=True) for b in self.batches}

    def serve_ns(self, m: int, costs: dict | None = None) -> int | None:
        """The cost of answering m robots: full batches of the largest size, then the rest
        in the smallest batch that holds it (None: a cost unknown). costs: _costs()."""
        if m <= 0:
            return 0
        costs = self._costs() if costs is None else costs
        top = self.batches[-1]
        full, rest = divmod(m, top)
        parts = [(top, full)] + ([(next(b for b in self.batches if b >= rest), 1)] if rest else [])
        if any(costs[b] is None for b, count in parts if count):
            return None
        return sum(costs[b] * count for b, count in parts)

    def worst_ns(self, n: int, costs: dict | None = None, delay_ns: int | None = None
                 ) -> int | None:
        """The longest a robot waits, among n, for its chunk: a batch already running, then
        its own batch of those that arrived meanwhile, at the median costs, plus one delay
        (delay_ns(); see the module doc)."""
        costs = self._costs() if costs is None else costs
        whole = self.serve_ns(n, costs)
        if whole is None:
            return None
        delay = self.delay_ns() if delay_ns is None else delay_ns
        return delay + max([whole] + [self.serve_ns(a, costs) + self.serve_ns(n - a, costs)
                                      for a in range(1, n)])

    def capacity(self, deadline_ns: int) -> int | None:
        """How many robots fit at the policy's rate (None: no measurement yet): the largest n
        whose worst case fits. The worst case grows with n, so: double n until it does not
        fit, then bisect; O(cap log cap) (a bisection over 1..4096 priced thousands of robots
        and took 17-38 ms, a stall of the node's loop once a second in check_load)."""
        if not self.cycle_ns:
            return None
        costs, budget = self._costs(), UTILISATION * min(deadline_ns, self.period_ns)
        delay = self.delay_ns()

        def fits(n: int) -> bool:
            worst = self.worst_ns(n, costs, delay)
            return worst is not None and worst <= budget
        hi = 2
        while hi < MAX_ROBOTS and fits(hi):
            hi *= 2
        lo, hi = hi // 2, min(hi, MAX_ROBOTS)  # lo fits (1 always: the node serves one robot)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return lo

    def offer(self, env: Envelope, now_ns: int, deadline_ns: int) -> RobotSlot | None:
        """An observation arrived: the robot's slot (the observation now waits there), or
        None (refused: its stamps, or admission). A refusal or a late admission is said."""
        name = env.src
        self._count_arrival(name, now_ns)
        slot = self.slots.get(name)
        if self._bad_stamps(env, slot, now_ns, deadline_ns):
            return None
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
                    self.say(f"refused.{name}", why)
                return None
            if checked is not None:
                del self.refused[name]
                self.counters["robots_admitted_late"] += 1
                self.say(f"admitted.{name}", f"robot {name!r} admitted: the load has fallen to "
                         f"what {len(self.slots) + 1} robots fit", error=False)
            budget = self.first_budget.fresh() if self._first_taken else self.first_budget
            self._first_taken = True
            slot = self.slots[name] = RobotSlot(name, budget, PeerClock() if self.remote else None)
        if env.seq <= slot.last_seq:  # a new publisher: the robot restarted
            self._restarted(slot, env.seq, now_ns)
        slot.last_seq, slot.last_seen_ns = env.seq, now_ns
        if slot.waiting is not None:
            slot.counters["obs_superseded"] += 1
        slot.waiting = env
        if slot.since is None:
            slot.since = env
        return slot

    def _bad_stamps(self, env: Envelope, slot: RobotSlot | None, now_ns: int,
                    deadline_ns: int) -> bool:
        """Whether env's stamps refuse it (module doc): counted and said; False if fine or
        not yet checkable (another host's clock not bracketed)."""
        st = env.stamps
        capture, recv = st.get("capture"), st.get("recv", now_ns)
        if capture is None:
            return False
        name, kind, why = env.src, None, ""
        if slot is None:  # a robot not yet heard: one host's clock, or not yet bracketed
            bounds = None if self.remote else (0, 0)
        else:
            bounds = (0, 0) if slot.clock is None else slot.clock.bounds()
        if bounds is not None and bounds[0] <= bounds[1]:  # else: not bracketed yet
            kind, why = _too_old_or_new("obs", "its capture", capture, bounds, recv, now_ns,
                                        deadline_ns)
            for camera, frame in (env.body.get("frames") or {}).items():
                if kind is not None:
                    break
                kind, why = _too_old_or_new("frame", f"its camera {camera!r}'s frame capture",
                                            frame["capture_ns"], bounds, recv, now_ns,
                                            deadline_ns)
        publish = st.get("publish")
        if kind is None and publish is not None and capture > publish:
            kind, why = "obs_stamps_disordered", (
                f"its capture is {(capture - publish) / 1e6:.1f} ms after its own publish "
                f"stamp; stamp capture when the sensor reads")
        if kind is None:
            return False
        self.counters[kind] += 1
        self.say(f"{kind}.{name}", lambda: f"observation {env.seq} from {name!r} refused: "
                                          f"{why} ({kind})")
        return True

    def _restarted(self, slot: RobotSlot, seq: int, now_ns: int) -> None:
        """slot's seq went back to `seq`: a restart, or, again within SEQ_JUMP_WINDOW_NS,
        two processes publishing as one robot (said, with the fix)."""
        slot.counters["restarts"] += 1
        slot.previous = None
        if slot.last_restart_ns is not None and now_ns - slot.last_restart_ns < SEQ_JUMP_WINDOW_NS:
            self.counters["obs_seq_jumps"] += 1
            name, last = slot.name, slot.last_seq
            self.say(f"seq_jumps.{name}", lambda: (
                f"robot {name!r}: its observations' seq goes back and forth ({last} -> {seq}):"
                f" two processes publish as {name!r}; stop the other one, or on ipc make the "
                f"endpoint's directory private (docs/fleet.md)"))
        slot.last_restart_ns = now_ns

    def _count_arrival(self, src: str, now_ns: int) -> None:
        """One more observation from src (admitted, refused or not) this second; a second
        with over FLOOD_FACTOR times the policy rate is a flood: counted and said."""
        window = self.arrivals.get(src)
        if window is None:
            window = self.arrivals[src] = [now_ns, 0]
        if now_ns - window[0] < 1_000_000_000:
            window[1] += 1
            return
        limit = FLOOD_FACTOR * 1e9 / self.period_ns
        if window[1] > limit:
            self.counters["obs_floods"] += 1
            n = window[1]
            self.say(f"flood.{src}", lambda: (
                f"robot {src!r} sent {n} observations in a second, over {limit:.0f} "
                f"({FLOOD_FACTOR}x the policy rate): only its newest is answered; publish at "
                f"the policy rate"))
        window[0], window[1] = now_ns, 1

    def _refusal(self, name: str, deadline_ns: int) -> str | None:
        n = len(self.slots)
        if self.max_robots is not None and n >= self.max_robots:
            return (f"robot {name!r} refused: this node serves at most {self.max_robots} "
                    f"robots (--max-robots); start another node for it")
        cap = self.capacity(deadline_ns)
        if cap is not None and n >= cap:
            window = min(deadline_ns, self.period_ns) / 1e6
            if self.batches == [1]:
                measured = (f"one cycle measured at {self.batch_ns(1, True) / 1e6:.1f} ms "
                            f"median, {self.cycle_ns / 1e6:.1f} ms p99")
            else:
                measured = "a batch of " + ", ".join(
                    f"{b} {self.batch_ns(b, True) / 1e6:.1f} ms" for b in self.batches
                    if self.batch_ns(b, True)) + " (median, measured or profiled)"
            return (f"robot {name!r} refused: {n + 1} robots at {1e9 / self.period_ns:.3g} Hz "
                    f"need {self.worst_ns(n + 1) / 1e6:.1f} ms of {UTILISATION * window:.1f} ms "
                    f"per {window:.1f} ms window ({measured}); this node fits "
                    f"{cap}: serve it from another node, or lower the policy rate or the "
                    f"model's cost")
        return None

    def check_load(self, deadline_ns: int) -> None:
        """Whether the robots admitted still fit the measured costs; a change is said and
        going over is counted (overloads)."""
        n, cap = len(self.slots), self.capacity(deadline_ns)
        self.fits = cap
        over = cap is not None and n > max(cap, 1)
        if over == self.overloaded:
            return
        self.overloaded = over
        if over:
            self.counters["overloads"] += 1
            self.say("overloaded", (
                f"overloaded: {n} robots admitted, the costs measured now fit {cap} within "
                f"{UTILISATION * min(deadline_ns, self.period_ns) / 1e6:.1f} ms per window; "
                f"their cycles may be late (each late one is counted by the monitor and its "
                f"robot's controller): lower the load, or serve some robots from another node"))
        else:
            self.say("load_fits", f"load fits again: {n} robots admitted, {cap} fit", error=False)

    @property
    def first_clock(self) -> PeerClock | None:
        """The first robot's clock (another host's; None on one host or before a robot)."""
        first = next(iter(self.slots.values()), None)
        return None if first is None else first.clock

    def figures(self) -> tuple[dict, dict]:
        """(counters, gauges in us) for the node's health: the robots' own, and per robot
        when there are several or one was refused."""
        slots = list(self.slots.values())
        c = {**self.counters, "robots": len(slots),
             "obs_skipped": sum(s.counters["obs_superseded"] for s in slots),
             "robot_restarts": sum(s.counters["restarts"] for s in slots)}
        g = {}
        if self.slack_ns is not None:
            g["slack_us"] = self.slack_ns / 1e3
        offset = self.first_clock.offset_ns if self.first_clock is not None else None
        if offset is not None:
            g["robot_clock_offset_us"] = offset / 1e3
        if len(slots) > 1 or self.refused:
            for s in slots:
                c[f"robot.{s.name}.cycles"] = s.counters["cycles"]
                c[f"robot.{s.name}.budget_level"] = s.budget.index
                c[f"robot.{s.name}.obs_stale"] = s.counters["obs_stale"]
                if s.slack_ns is not None:
                    g[f"robot.{s.name}.slack_us"] = s.slack_ns / 1e3
        for name in self.refused:  # refused and not admitted since (the dashboard)
            c[f"robot.{name}.refused"] = 1
        if self.fits is not None:  # the fleet controller places robots by it
            c["capacity"] = self.fits
        if self.cycle_ns:
            g["cycle_cost_us"] = self.cycle_ns / 1e3
        for b in self.batches[1:]:
            cost = self.batch_ns(b)
            if cost:
                g[f"batch_cost_us.b{b}"] = cost / 1e3
        return c, g

    def answered(self, slot: RobotSlot, capture: int | None, last_publish_ns: int | None) -> None:
        """One of slot's cycles answered. Its slack, deadline - (last publish - capture) with
        capture on the node's clock (the last waypoint: the controller rejects any waypoint
        past the deadline, so a chunk is on time only when its last one is), drives the
        robot's budget and is the node's slack gauge; unknown (no capture, nothing sent,
        another host's clock not yet bracketed both ways: counted) it is not acted on."""
        slot.counters["cycles"] += 1
        if capture is None or last_publish_ns is None:
            return
        offset = 0 if slot.clock is None else slot.clock.offset_ns
        if offset is None:
            self.counters["slack_unknown"] += 1
            return
        self.slack_ns = slot.slack_ns = slot.budget.deadline_ns - (last_publish_ns -
                                                                   (capture - offset))
        slot.budget.update(slot.slack_ns)

    def next(self, deadline_ns: int) -> RobotSlot | None:
        """The waiting robot first in the deadline order (earliest deadline first, by
        rank_ns); its observation is handed out (slot.waiting cleared by the caller's take)."""
        best, best_due = None, None
        for slot in self.slots.values():
            if slot.waiting is None:
                continue
            due = slot.rank_ns(deadline_ns)
            if best is None or (due is not None and (best_due is None or due < best_due)):
                best, best_due = slot, due
        return best

    def next_batch(self, deadline_ns: int, now_ns: int, max_batch: int) -> list[RobotSlot]:
        """The waiting robots to answer together, most urgent first: the first in the
        deadline order, then those waiting at its budget level in that order, up to
        max_batch, less the least urgent while the batch would end after the first one's
        deadline ([]: none waits). Observations past the deadline are dropped first
        (_expire); the robots returned start waiting afresh (their `since` is cleared)."""
        self._expire(now_ns, deadline_ns)
        first = self.next(deadline_ns)
        if first is None or max_batch <= 1:
            batch = [] if first is None else [first]
        else:
            level, late = first.budget.level, 1 << 62
            batch = sorted((s for s in self.slots.values()
                            if s.waiting is not None and s.budget.level == level),
                           key=lambda s: (s is not first, s.rank_ns(deadline_ns) or late)
                           )[:max_batch]
            due = first.due_ns(deadline_ns)
            while len(batch) > 1 and due is not None:
                cost = self.batch_ns(next(b for b in self.batches if b >= len(batch)))
                if cost is None or now_ns + cost <= due:
                    break
                batch.pop()
        for slot in batch:
            slot.since = None
        return batch

    def _expire(self, now_ns: int, deadline_ns: int) -> None:
        """Drop the waiting observations already older than the deadline for every offset the
        clock estimate allows (their arrival stands in for a capture not yet movable): their
        chunks could never be applied, and under overload answering them first would make
        the next ones late too. Counted as obs_stale (node and robot), said once a second."""
        for slot in self.slots.values():
            env = slot.waiting
            if env is None:
                continue
            capture, bounds = env.stamps.get("capture"), (0, 0)
            if slot.clock is not None:
                bounds = slot.clock.bounds()
            if capture is None or bounds is None or bounds[0] > bounds[1]:
                capture, bounds = env.stamps.get("recv"), (0, 0)
            age_ns = None if capture is None else now_ns - (capture - bounds[0])
            if age_ns is None or age_ns <= deadline_ns:
                continue
            slot.waiting = None
            self.counters["obs_stale"] += 1
            slot.counters["obs_stale"] += 1
            name, seq = slot.name, env.seq
            self.say(f"obs_stale.{name}", lambda: (
                f"observation {seq} from {name!r} waited {age_ns / 1e6:.1f} ms, past the "
                f"{deadline_ns / 1e6:g} ms deadline, before a cycle was free: not answered "
                f"(obs_stale); the node is overloaded: lower the load, or serve some robots "
                f"from another node"))

    def leave_idle(self, now_ns: int) -> list[str]:
        """Free the slots of robots silent for leave_after_ns; their names. A refused robot
        silent that long is forgotten too (a refused one still sending is checked again
        every RETRY_NS, which keeps it)."""
        gone = [n for n, s in self.slots.items()
                if s.waiting is None and now_ns - s.last_seen_ns > self.leave_after_ns]
        for n in gone:
            del self.slots[n]
            self.counters["robots_left"] += 1
        for n in [n for n, t in self.refused.items()
                  if now_ns - t > self.leave_after_ns + RETRY_NS]:
            del self.refused[n]
        for n in [n for n, (start, _) in self.arrivals.items()
                  if now_ns - start > self.leave_after_ns + 1_000_000_000]:
            del self.arrivals[n]
        return gone


def _too_old_or_new(what: str, whose: str, capture: int, bounds: tuple, recv: int, now_ns: int,
                    deadline_ns: int) -> tuple[str | None, str]:
    """(what_future or what_stale, why) for a capture stamp of another clock bracketed by
    `bounds` (offset low, high), or (None, "") when it may be answered."""
    low, high = bounds
    if capture - high > recv:  # in the future even at the largest offset allowed
        return f"{what}_future", (
            f"{whose} is {(capture - high - recv) / 1e6:.1f} ms ahead of its arrival on this "
            f"node's clock (beyond the clock estimate's {(high - low) / 1e6:.3f} ms); fix the "
            f"robot's clock or stamps")
    if now_ns - (capture - low) > deadline_ns:  # older than the deadline for sure
        return f"{what}_stale", (
            f"{whose} is {(now_ns - capture + low) / 1e6:.1f} ms old, past the "
            f"{deadline_ns / 1e6:g} ms deadline: its chunk could never be applied")
    return None, ""
