"""What a cycle costs on this node: per batch size and per budget level, measured or profiled.

The node times every batch it runs and records it here (`record(batch, level, ns)`); before
MIN_TIMED batches of a size were timed, that size's start-up profile (`set_profile`, the
latency table) stands in, scaled by what the batch-1 cycles measured against their own
profile. A budget level other than full quality is priced as full quality times its ratio:
its batch-1 cycles measured against full quality's (MIN_TIMED of each), else its start-up profile
(`set_level_profile`) against full quality's, else 1 (a level never timed is planned as dear
as full quality, so it is never counted on to save time it may not save).

Admission plans with serve(m), the cost of answering m robots (full batches of the largest
size, then the smallest that holds the rest), and the worst case of n robots,
max(serve(n), serve(a) + serve(n - a) for 0 < a < n) at the typical (median) costs plus one
delay (the largest p99 less median of a batch size timed: a preemption, which a busy host
inflicts on some cycles of a window, not on all of them). Planned at n * p99, a 2-core host
under load, where the tiny model's median is a few ms and its p99 10-40 ms of preemption,
fitted 1 or 2 robots a node.

A figure goes **stale** once FRESH_RECORDS cycles of other sizes or levels were timed since
its last (the node runs another level or batch size now, and the load it was measured under
may be gone): full quality's batch-1 cost is then taken from the level run now (its cycles
over its profiled ratio), and the delay from the figures still fresh. (Without it, a node
whose load put every robot on its cheapest level priced that level for good off full
quality's cycles timed at start-up, under a busy second: 66 ms where it now ran 8 robots in
a few ms each, so it refused 7 of 8 robots for the whole run.)

Pure bookkeeping, no clock reads; not thread-safe.
"""

from __future__ import annotations

from rtinfer.realtime.hist import LatencyHistogram

MIN_TIMED = 16  # batches of one size timed before their figures replace the profile
MAX_ROBOTS = 4096  # the most robots capacity() ever reports
FRESH_RECORDS = 256  # a figure not recorded in this many cycles timed since is stale (doc)


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
        self._p50 = self._p99 = None  # the last percentiles (ns), until the next record()
        self._fresh = True
        self.last = 0  # Costs' count of cycles timed at this one's last

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


class Costs:
    """Per batch size (full quality) and per budget level (batch 1), the cycles timed and
    the start-up profile; every figure in ns, None while unknown."""

    def __init__(self, levels: int = 1):
        self.batches = [1]  # the batch sizes the node runs
        self.timed = {1: CycleCost()}  # batch size -> full-quality batches timed
        self.profile: dict[int, int] = {}  # batch size -> its start-up profile
        self.levels = max(1, int(levels))
        self.level_timed = {lv: CycleCost() for lv in range(1, self.levels)}  # batch 1
        self.level_profile: dict[int, int] = {}  # level -> its start-up batch-1 cost
        self.records = 0  # cycles timed, of every size and level
        self.last_level = 0  # the level of the last batch-1 cycle timed
        self.answered = self.missed = 0  # observations, since the last take_service()

    def set_batches(self, batches) -> None:
        self.batches = sorted({1, *batches})
        for b in self.batches:
            self.timed.setdefault(b, CycleCost())

    def set_profile(self, timed: dict[int, int]) -> None:
        """The start-up latency table (batch size -> ns). A batched graph's cost grows with
        its batch, so a batched size timed above a larger one was noise (a preemption during
        its rounds): it is lowered to the larger one's figure."""
        self.profile.update(timed)
        low = None
        for b in sorted((b for b in self.profile if b > 1), reverse=True):
            low = self.profile[b] if low is None else min(low, self.profile[b])
            self.profile[b] = low

    def set_level_profile(self, timed: dict[int, int]) -> None:
        """Each budget level's start-up batch-1 cost (level -> ns; level 0 is full quality)."""
        self.level_profile.update(timed)

    def record(self, batch: int, level: int, ns: int) -> None:
        """One batch of `batch` rows timed at budget level `level` (a level's batches of
        more than one row are not kept: its ratio is taken from its single cycles)."""
        cost = (
            self.timed[batch] if level == 0 else self.level_timed.get(level) if batch == 1 else None
        )
        if cost is None:
            return
        self.records += 1
        cost.record(ns)
        cost.last = self.records
        if batch == 1:
            self.last_level = level

    def served(self, answered: int = 0, missed: int = 0) -> None:
        """Observations the schedule answered, or missed (dropped as too old to answer in
        time, or superseded by a newer one before it was taken up)."""
        self.answered += answered
        self.missed += missed

    def take_service(self) -> tuple[int, int]:
        """(answered, missed) since the last call; the tally starts again. Taken at each
        check (up to 10 a second): one superseded among a few observations then reads as an
        overload, noise that relief's share of a window absorbs. Judged over ten
        observations a robot, or a second of node time, a node throttled to 20 ms of CPU a
        second (tests/test_fleet_ray_relief.py) was not found out for 30 s: not understood
        yet, so not done."""
        out = (self.answered, self.missed)
        self.answered = self.missed = 0
        return out

    def fresh(self, cost: CycleCost, least: int = 1) -> bool:
        """Whether `cost` has `least` cycles timed, the last of them within FRESH_RECORDS."""
        return cost.count >= least and self.records - cost.last <= FRESH_RECORDS

    def batch_ns(self, b: int, median: bool = False, level: int = 0) -> int | None:
        """The cost of one batch of b robots (b a batch size the node runs) at `level`: its
        measured p99 (median: its median) once MIN_TIMED were timed (any count for b = 1 at
        full quality) and while fresh, else its profile scaled by batch 1's measured-over-
        profiled ratio; times the level's ratio (batch 1 at a level: its own cycles once
        MIN_TIMED were timed, while fresh); None when unknown."""
        if b == 1 and level:
            own = self.level_timed.get(level)
            if own is not None and self.fresh(own, MIN_TIMED):
                return _pct(own, median)
        full = self._full(b, median)
        if full is None:
            return None
        return full if level == 0 else int(full * self.ratio(level))

    def _full(self, b: int, median: bool) -> int | None:
        """A batch of b at full quality now (batch_ns's doc)."""
        timed = self.timed.get(b)
        if timed is not None and self.fresh(timed, 1 if b == 1 else MIN_TIMED):
            return _pct(timed, median)
        one = self._single(median)
        if b == 1:
            return one
        prior, one_prior = self.profile.get(b), self.profile.get(1)
        if prior is None:
            return _pct(timed, median) if timed is not None and timed.count >= MIN_TIMED else None
        return int(prior * one / one_prior) if one and one_prior else prior

    def _single(self, median: bool) -> int | None:
        """One cycle at full quality now: its own cycles while fresh, else those of the
        level run now over that level's profiled ratio, else its own stale ones, else its
        start-up profile."""
        full, level = self.timed[1], self.last_level
        if self.fresh(full):
            return _pct(full, median)
        own, mine, top = (
            self.level_timed.get(level),
            self.level_profile.get(level),
            self.level_profile.get(0),
        )
        if level and own is not None and self.fresh(own) and mine and top:
            return int(_pct(own, median) * top / mine)
        return _pct(full, median) if full.count else self.profile.get(1)

    def ratio(self, level: int) -> float:
        """A level's cost over full quality's (module doc); 1.0 while unknown."""
        timed, full = self.level_timed.get(level), self.timed[1]
        if timed is not None and self.fresh(timed, MIN_TIMED) and self.fresh(full, MIN_TIMED):
            return min(1.0, timed.p50_ns() / max(full.p50_ns(), 1))
        mine, top = self.level_profile.get(level), self.level_profile.get(0)
        return min(1.0, mine / top) if mine and top else 1.0

    def delay_ns(self) -> int:
        """The one delay a window is planned to absorb: the largest p99 less median among
        the batch sizes timed at full quality and fresh (a preemption, which a busy host
        inflicts on some cycles, not on every cycle of a window); 0 before any was timed."""
        return max(
            (
                c.p99_ns() - c.p50_ns()
                for b, c in self.timed.items()
                if self.fresh(c, 1 if b == 1 else MIN_TIMED)
            ),
            default=0,
        )

    def medians(self, level: int = 0) -> dict[int, int | None]:
        """Per batch size, the typical (median) cost at `level` that admission plans with."""
        return {b: self.batch_ns(b, median=True, level=level) for b in self.batches}

    def serve_ns(self, m: int, costs: dict | None = None) -> int | None:
        """The cost of answering m robots: full batches of the largest size, then the rest
        in the smallest batch that holds it (None: a cost unknown). costs: medians()."""
        if m <= 0:
            return 0
        costs = self.medians() if costs is None else costs
        top = self.batches[-1]
        full, rest = divmod(m, top)
        parts = [(top, full)] + ([(next(b for b in self.batches if b >= rest), 1)] if rest else [])
        if any(costs[b] is None for b, count in parts if count):
            return None
        return sum(costs[b] * count for b, count in parts)

    def worst_ns(
        self, n: int, costs: dict | None = None, delay_ns: int | None = None
    ) -> int | None:
        """The longest a robot waits, among n, for its chunk: a batch already running, then
        its own batch of those that arrived meanwhile, at the median costs, plus one delay."""
        costs = self.medians() if costs is None else costs
        whole = self.serve_ns(n, costs)
        if whole is None:
            return None
        delay = self.delay_ns() if delay_ns is None else delay_ns
        return delay + max(
            [whole] + [self.serve_ns(a, costs) + self.serve_ns(n - a, costs) for a in range(1, n)]
        )

    def capacity(self, window_ns: float, level: int = 0) -> int | None:
        """How many robots' worst case fits window_ns at `level` (None: no cycle timed yet).
        The worst case grows with n, so: double n until it does not fit, then bisect;
        O(cap log cap) (a bisection over 1..4096 priced thousands of robots and took
        17-38 ms, a stall of the node's loop once a second)."""
        if not self.batch_ns(1):
            return None
        costs, delay = self.medians(level), self.delay_ns()

        def fits(n: int) -> bool:
            worst = self.worst_ns(n, costs, delay)
            return worst is not None and worst <= window_ns

        hi = 2
        while hi < MAX_ROBOTS and fits(hi):
            hi *= 2
        lo, hi = hi // 2, min(hi, MAX_ROBOTS)  # lo fits (1 always: the node serves one robot)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return lo


def _pct(cost: CycleCost, median: bool) -> int | None:
    return cost.p50_ns() if median else cost.p99_ns()
