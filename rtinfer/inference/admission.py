"""Which robots a node admits: those it can serve at least at its cheapest budget level.

n robots at the policy's rate fit while their worst case (rtinfer.inference.cycle_cost:
a batch already running, then one's own, at the median costs plus one delay) at the
cheapest level's costs is <= UTILISATION * min(deadline, period). Between full quality and
that, the node degrades instead of refusing (rtinfer.inference.schedule: a cheaper level, a
lower observation rate asked). A robot joining beyond it is refused, said once with what
load would fit, and counted (robots_refused); its observations are counted (obs_refused)
and never answered, so it is never admitted and then served late in silence. A refused
robot that keeps sending is checked again once every RETRY_NS: when the load has fallen
enough it is admitted, and that is said too (robots_admitted_late). When the load rises
after admission so that the robots already admitted no longer fit even at the cheapest
level (`check`, once a second), that is said once and counted (overloads), and said again
when they fit once more: their cycles may then be late, and every late one is counted by the
monitor and the robot's controller, never silent.

A robot its robots file names (rtinfer.inference.robots_file: placed on this node by a
fleet, within the capacity declared for it, or by an operator) is admitted whatever the
costs measured now (--max-robots still caps it): refused, it would be served by nobody
while it is placed again, and a node's measured costs swing 2-4x while a neighbour starts
(a host's loss and restart on a shared machine). It degrades instead, `check` says the
overload, and its capacity, below its load, is what the fleet relieves it by.

What `check` finds is also the node's `capacity` (health), which the fleet places and
relieves by. Besides the costs, it counts the service since the last check (the schedule's
tally, rtinfer.inference.cycle_cost's take_service): when more than
MISSED_SHARE of the robots' observations went unanswered (expired, or superseded by a newer
one before the node took it up: a node starved of CPU by a neighbour runs few cycles, mostly
fast, so its timed costs rise late; a host throttled to 20 ms of CPU a second went on
reporting room for hundreds of robots while it answered one observation in four), the robots
fit are those its answered share served: n x answered / (answered + missed).

Pure bookkeeping, no clock reads; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.inference.cycle_cost import Costs

UTILISATION = 0.8  # the share of the window admission plans to use: the rest absorbs jitter
MISSED_SHARE = 0.1  # more of the observations than this unanswered since a check: not fitting
RETRY_NS = 1_000_000_000  # how often a refused robot that keeps sending is checked again
COUNTERS = ("robots_refused", "robots_admitted_late", "obs_refused", "overloads")


class Admission:
    def __init__(
        self,
        costs: Costs,
        counters: dict,
        say: Callable[..., None],
        max_robots: int | None = None,
        degrade: bool = True,
        budget=None,
    ):
        """degrade: plan at the cheapest level (the schedule degrades); False: at full
        quality, as before the schedule degraded (for comparisons). budget: the first
        robot's Budget; a fixed one (auto off) is planned at its own level."""
        for k in COUNTERS:
            counters.setdefault(k, 0)
        self.costs, self.counters, self.say, self.max_robots = costs, counters, say, max_robots
        self.degrade, self.budget = degrade, budget
        self.refused: dict[str, int] = {}  # robot -> when it was last checked (ns)
        self.placed: frozenset[str] = frozenset()  # the robots its robots file names
        self.overloaded = False  # the admitted robots no longer fit (check)
        self.fits: int | None = None  # how many robots fit, as check last found
        self.fits_full: int | None = None  # ... at full quality

    @property
    def cheapest(self) -> int:
        """The level admission plans at (module doc; a fixed budget's own)."""
        if self.budget is not None and not self.budget.auto:
            return self.budget.index
        return self.costs.levels - 1 if self.degrade else 0

    def capacity(self, deadline_ns: int, period_ns: int, level: int | None = None) -> int | None:
        """How many robots fit at `level` (default: the cheapest; None: nothing timed)."""
        return self.costs.capacity(
            UTILISATION * min(deadline_ns, period_ns), self.cheapest if level is None else level
        )

    def admit(self, name: str, n: int, now_ns: int, deadline_ns: int, period_ns: int) -> bool:
        """Whether robot `name`, not yet admitted, joins the n admitted (module doc)."""
        checked = self.refused.get(name)
        if checked is not None and now_ns - checked < RETRY_NS:
            self.counters["obs_refused"] += 1
            return False
        why = self._refusal(name, n, deadline_ns, period_ns)
        if why is not None:
            if checked is None:
                self.counters["robots_refused"] += 1
                self.say(f"refused.{name}", why)
            self.refused[name] = now_ns
            self.counters["obs_refused"] += 1
            return False
        if checked is not None:
            del self.refused[name]
            self.counters["robots_admitted_late"] += 1
            self.say(
                f"admitted.{name}",
                f"robot {name!r} admitted: the load has fallen to what {n + 1} robots fit",
                error=False,
            )
        return True

    def _refusal(self, name: str, n: int, deadline_ns: int, period_ns: int) -> str | None:
        if self.max_robots is not None and n >= self.max_robots:
            return (
                f"robot {name!r} refused: this node serves at most {self.max_robots} "
                f"robots (--max-robots); start another node for it"
            )
        cap = self.capacity(deadline_ns, period_ns)
        if cap is None or n < cap or name in self.placed:  # placed: it degrades (doc)
            return None
        costs, level = self.costs, self.cheapest
        window = min(deadline_ns, period_ns) / 1e6
        if costs.batches == [1]:
            measured = (
                f"one cycle measured at {costs.batch_ns(1, True, level) / 1e6:.1f} ms "
                f"median, {costs.batch_ns(1, level=level) / 1e6:.1f} ms p99"
            )
        else:
            measured = (
                "a batch of "
                + ", ".join(
                    f"{b} {costs.batch_ns(b, True, level) / 1e6:.1f} ms"
                    for b in costs.batches
                    if costs.batch_ns(b, True, level)
                )
                + " (median, measured or profiled)"
            )
        at = f" at its cheapest budget level ({level})" if level else ""
        return (
            f"robot {name!r} refused: {n + 1} robots at {1e9 / period_ns:.3g} Hz "
            f"need {costs.worst_ns(n + 1, costs.medians(level)) / 1e6:.1f} ms of "
            f"{UTILISATION * window:.1f} ms per {window:.1f} ms window{at} ({measured}); "
            f"this node fits {cap}: serve it from another node, or lower the policy rate "
            f"or the model's cost"
        )

    def check(self, n: int, deadline_ns: int, period_ns: int) -> None:
        """Whether the n robots admitted still fit the measured costs at the cheapest level
        and the service since the last check (module doc); a change is said and going over
        is counted (overloads)."""
        cap = self.capacity(deadline_ns, period_ns)
        full = self.capacity(deadline_ns, period_ns, 0)
        answered, missed = self.costs.take_service()
        served = None
        if n and missed > MISSED_SHARE * (answered + missed):
            served = max(1, n * answered // (answered + missed))
            cap = served if cap is None else min(cap, served)
            full = served if full is None else min(full, served)
        self.fits, self.fits_full = cap, full
        over = cap is not None and n > max(cap, 1)
        if over == self.overloaded:
            return
        self.overloaded = over
        if over:
            self.counters["overloads"] += 1
            at = " even at the cheapest budget level" if self.cheapest else ""
            why = (
                f"the costs measured now fit {cap}{at} within "
                f"{UTILISATION * min(deadline_ns, period_ns) / 1e6:.1f} ms per window"
                if served is None or served > cap
                else f"{missed} of {answered + missed} observations went unanswered (expired "
                f"or superseded) since the last check, so they fit {cap}"
            )
            self.say(
                "overloaded",
                (
                    f"overloaded: {n} robots admitted, {why}; their cycles may be late (each late "
                    f"one is counted by the monitor and its robot's controller): lower the load, "
                    f"or serve some robots from another node"
                ),
            )
        else:
            self.say("load_fits", f"load fits again: {n} robots admitted, {cap} fit", error=False)

    def forget(self, now_ns: int, after_ns: int) -> None:
        """Forget the refused robots silent for after_ns (+ RETRY_NS)."""
        for n in [n for n, t in self.refused.items() if now_ns - t > after_ns + RETRY_NS]:
            del self.refused[n]
