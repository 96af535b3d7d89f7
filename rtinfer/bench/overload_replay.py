"""Replay recorded (or synthetic) observation arrivals through the real `Robots` on a
simulated clock: the node's loop (take -> pick -> run -> account) with each cycle's cost
drawn from a cost model, so a scheduling rule is judged on the same arrivals as another and
the verdict does not depend on this machine's speed.

    arrivals = synthetic({"r0": 10.0, "r1": 20.0}, seconds=10, seed=0)
    result = replay(Robots(budget, remote=False, period_ns=...), arrivals, CostModel(...),
                    deadline_ns=100_000_000)

A chunk is *applied in time* when its last waypoint is published (the cycle's end) no later
than the deadline after its observation's capture: the controller rejects the rest. Goodput
is the chunks applied in time per second, summed over robots; a robot's service is its
longest gap without one (from its first observation, and to the end of the replay); its
staleness limit is the deadline plus its observation interval (the controller's watchdog
holds after that long), or the longer period the node asked of it. A robot honours an asked
period by skipping observations until that long has passed since the last one it sent
(honour=False: it keeps its own rate).

Pure simulation: no clock reads, no sockets; deterministic for a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rtinfer.transport.wire import Envelope

SECOND = 1_000_000_000


@dataclass(frozen=True)
class Arrival:
    capture_ns: int
    recv_ns: int
    robot: str
    period_ns: int  # the robot's own observation period


def synthetic(
    rates_hz: dict[str, float],
    seconds: float,
    *,
    seed: int = 0,
    latency_ns: int = 1_000_000,
    jitter_ns: int = 0,
    phases_ns: dict[str, int] | None = None,
) -> list[Arrival]:
    """Each robot observing at its rate from its phase (default: a random one within its
    period), each arrival latency_ns plus up to jitter_ns after its capture; time-ordered."""
    rng = random.Random(seed)
    out = []
    for name, hz in rates_hz.items():
        period = int(SECOND / hz)
        t = (phases_ns or {}).get(name, rng.randrange(period))
        while t < seconds * SECOND:
            out.append(
                Arrival(
                    t, t + latency_ns + (rng.randrange(jitter_ns) if jitter_ns else 0), name, period
                )
            )
            t += period
    return sorted(out, key=lambda a: (a.recv_ns, a.robot))


@dataclass
class CostModel:
    """A cycle's cost per budget level (median ns of a batch of one), a batch of b costing
    (1 + batch_slope * (b - 1)) times that; jitter: the cost is drawn from the level's median
    times one of `spread` (recorded ratios of a cycle to its median; default none)."""

    level_ns: list[int]
    batch_slope: float = 1.0
    spread: list[float] = field(default_factory=lambda: [1.0])
    busy_from_ns: int | None = None  # from then on every cycle costs busy_factor times more
    busy_factor: float = 1.0  # (a CPU-bound process started beside the node)

    def cost_ns(self, level: int, batch: int, rng: random.Random, now_ns: int = 0) -> int:
        base = self.level_ns[level] * (1 + self.batch_slope * (batch - 1))
        if self.busy_from_ns is not None and now_ns >= self.busy_from_ns:
            base *= self.busy_factor
        return int(base * rng.choice(self.spread))


@dataclass
class RobotRecord:
    staleness_ns: int
    first_ns: int | None = None
    last_fresh_ns: int | None = None
    gap_ns: int = 0
    applied: int = 0
    late: int = 0
    levels: dict = field(default_factory=dict)


def replay(
    robots,
    arrivals: list[Arrival],
    costs: CostModel,
    *,
    deadline_ns: int,
    max_batch: int = 1,
    seed: int = 0,
    honour: bool = True,
    warm_up: int = 3,
    profile: bool = True,
) -> dict:
    """Run the arrivals through `robots` (a rtinfer.inference.robots.Robots); returns the
    figures of the module doc: goodput_hz, worst_gap_ms, worst_over_limit (the worst gap
    over its robot's staleness limit), level_mix, refused, late, and per robot. profile:
    give it the start-up profile the node measures (each batch size and budget level)."""
    rng = random.Random(seed)
    if profile:
        robots.set_batches(range(1, max_batch + 1))
        quiet = [int(c) for c in costs.level_ns]  # profiled before any busy neighbour
        robots.set_profile(
            {b: int(quiet[0] * (1 + costs.batch_slope * (b - 1))) for b in range(1, max_batch + 1)}
        )
        if hasattr(robots, "cost_model"):
            robots.cost_model.set_level_profile(dict(enumerate(quiet)))
    end_ns = max(a.recv_ns for a in arrivals) + deadline_ns if arrivals else 0
    rec: dict[str, RobotRecord] = {}
    last_sent: dict[str, int] = {}
    seqs: dict[str, int] = {}
    t, i, cycles, next_plan = 0, 0, 0, SECOND
    record = getattr(robots, "record_cost", None)
    while True:
        while i < len(arrivals) and arrivals[i].recv_ns <= t:
            _offer(robots, arrivals[i], rec, last_sent, seqs, deadline_ns, honour)
            i += 1
        if t >= next_plan:
            robots.check_load(deadline_ns)
            next_plan += SECOND
        batch = robots.next_batch(deadline_ns, t, max_batch)
        if not batch:
            if i >= len(arrivals):
                break
            t = max(t, arrivals[i].recv_ns)
            continue
        level = getattr(batch[0], "level_index", batch[0].budget.index)
        envs = []
        for slot in batch:
            envs.append(slot.waiting)
            slot.waiting = None  # the node's encode takes it
        cost = costs.cost_ns(level, len(batch), rng, t)
        t += cost
        cycles += 1
        if cycles > warm_up:
            b = next(b for b in robots.batches if b >= len(batch))
            if record is not None:
                record(b, level, cost)
            else:  # Robots before costs were kept per level
                robots.costs[b].record(cost)
        for slot, env in zip(batch, envs):
            capture = env.stamps["capture"]
            robots.answered(slot, capture, t)
            _account(rec[slot.name], capture, t, deadline_ns, level)
    return _figures(robots, rec, end_ns)


def _offer(
    robots, a: Arrival, rec: dict, last_sent: dict, seqs: dict, deadline_ns: int, honour: bool
) -> None:
    slot = robots.slots.get(a.robot)
    asked = getattr(slot, "asked_period_ns", None) if slot is not None else None
    last = last_sent.get(a.robot)
    if honour and asked and last is not None and a.capture_ns - last < asked - a.period_ns // 2:
        return  # the robot skips this one: the node asked for fewer
    last_sent[a.robot] = a.capture_ns
    seqs[a.robot] = seqs.get(a.robot, 0) + 1
    stamps = {"capture": a.capture_ns, "publish": a.capture_ns, "recv": a.recv_ns}
    slot = robots.offer(
        Envelope(2, "obs", seqs[a.robot], a.robot, stamps, {}), a.recv_ns, deadline_ns
    )
    if slot is not None:
        r = rec.get(a.robot)
        if r is None:
            r = rec[a.robot] = RobotRecord(deadline_ns + a.period_ns, first_ns=a.capture_ns)
        if asked:
            r.staleness_ns = max(r.staleness_ns, deadline_ns + asked)


def _account(r: RobotRecord, capture: int, end: int, deadline_ns: int, level: int) -> None:
    if end - capture > deadline_ns:
        r.late += 1
        return
    r.gap_ns = max(r.gap_ns, end - (r.last_fresh_ns if r.last_fresh_ns is not None else r.first_ns))
    r.last_fresh_ns = end
    r.applied += 1
    r.levels[level] = r.levels.get(level, 0) + 1


def _figures(robots, rec: dict, end_ns: int) -> dict:
    per = {}
    for name, r in rec.items():
        gap = max(
            r.gap_ns, end_ns - (r.last_fresh_ns if r.last_fresh_ns is not None else r.first_ns)
        )
        per[name] = {
            "applied": r.applied,
            "late": r.late,
            "gap_ms": gap / 1e6,
            "limit_ms": r.staleness_ns / 1e6,
            "levels": dict(sorted(r.levels.items())),
        }
    seconds = end_ns / SECOND
    mix: dict[int, int] = {}
    for r in rec.values():
        for lv, n in r.levels.items():
            mix[lv] = mix.get(lv, 0) + n
    applied = sum(p["applied"] for p in per.values())
    return {
        "goodput_hz": applied / seconds if seconds else 0.0,
        "worst_gap_ms": max((p["gap_ms"] for p in per.values()), default=0.0),
        "worst_over_limit": max((p["gap_ms"] / p["limit_ms"] for p in per.values()), default=0.0),
        "late": sum(p["late"] for p in per.values()),
        "level_mix": {str(k): v / max(applied, 1) for k, v in sorted(mix.items())},
        "refused": robots.counters["robots_refused"],
        "obs_stale": robots.counters["obs_stale"],
        "robots": per,
    }
