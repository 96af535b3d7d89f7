"""The order of service when a node's robots need more than its time (rtinfer.inference.robots):
a robot whose clock is not yet bracketed is served in turn, never starved, and an observation
that waited past the deadline is dropped and counted, never answered late. The node's loop is
played on a simulated clock (each cycle a fixed cost), so the verdicts do not depend on this
machine's speed."""

from __future__ import annotations

from rtinfer.inference.budget import Budget, BudgetLevel
from rtinfer.inference.robots import Robots
from rtinfer.transport.wire import Envelope

MS = 1_000_000
DEADLINE_NS, PERIOD_NS = 100 * MS, 100 * MS


def _robots() -> tuple[Robots, list[str]]:
    said: list[str] = []
    r = Robots(
        Budget([BudgetLevel(6, 7, 4)], DEADLINE_NS),
        remote=True,
        period_ns=PERIOD_NS,
        say=lambda kind, text, error=True: said.append(kind),
    )
    return r, said


def _bracket(r: Robots, name: str) -> None:
    """name's clock bracketed as one host's (offset 0), as its obs and a trace would."""
    r.slots[name].clock.from_peer(0, MS)
    r.slots[name].clock.to_peer(0, MS)


def _play(
    r: Robots,
    phases_ms: dict[str, int],
    cost_ms: int,
    seconds: float,
    bracketed=(),
    seq_step: int = 1,
) -> list[tuple[str, int, int]]:
    """Robots publishing at 10 Hz from their phases, a node answering one per cycle of
    cost_ms: the (robot, start ns, due ns) of every cycle run. A robot in `bracketed` has its
    clock bracketed once its first observation is in (the others never are). seq_step: the
    envelope seq's step from one observation to the next (2: a trace published between)."""
    arrivals = sorted(
        (p * MS + k * PERIOD_NS, name)
        for name, p in phases_ms.items()
        for k in range(int(seconds * 1e9 / PERIOD_NS))
    )
    seqs = dict.fromkeys(phases_ms, 0)
    served, t, i = [], 0, 0
    while i < len(arrivals) or any(s.waiting for s in r.slots.values()):
        while i < len(arrivals) and arrivals[i][0] <= t:
            at, name = arrivals[i]
            seqs[name] += seq_step
            stamps = {"capture": at - MS, "publish": at - MS // 2, "recv": at}
            assert r.offer(Envelope(2, "obs", seqs[name], name, stamps, {}), at, DEADLINE_NS)
            if name in bracketed and r.slots[name].clock.offset_ns is None:
                _bracket(r, name)
            i += 1
        batch = r.next_batch(DEADLINE_NS, t, 1)
        if not batch:
            t = arrivals[i][0] if i < len(arrivals) else t
            if i >= len(arrivals):
                break
            continue
        slot = batch[0]
        served.append((slot.name, t, slot.due_ns(DEADLINE_NS)))
        slot.waiting = None  # the node's encode takes it
        t += cost_ms * MS
    return served


def test_a_robot_whose_clock_is_not_bracketed_is_served_in_turn_under_overload():
    # three robots of 50 ms cycles at 10 Hz: 150 ms of work per 100 ms. "new" was just placed
    # here and its clock is not bracketed (its trace of a first chunk never comes in this
    # play). Ranked last, it was never answered while the others waited (the starved robot of
    # the fleet bench); ranked by its arrival, it takes its turn.
    r, said = _robots()
    served = _play(r, {"a": 0, "b": 10, "new": 20}, cost_ms=50, seconds=3.0, bracketed=("a", "b"))
    counts = {name: sum(1 for s in served if s[0] == name) for name in ("a", "b", "new")}
    assert counts["new"] >= 5, counts
    assert min(counts.values()) * 2 >= max(counts.values()), counts  # no robot starves


def test_an_observation_that_waited_past_the_deadline_is_dropped_and_counted_not_answered():
    # four robots of 60 ms cycles: 240 ms of work per 100 ms, so observations wait in their
    # slots past the deadline; none of those is answered, each is counted once
    r, said = _robots()
    served = _play(
        r,
        {"a": 0, "b": 5, "c": 10, "d": 15},
        cost_ms=60,
        seconds=3.0,
        bracketed=("a", "b", "c", "d"),
    )
    assert served and all(start <= due for _, start, due in served)  # never a hopeless cycle
    stale = r.counters["obs_stale"]
    assert stale > 0 and stale == sum(s.counters["obs_stale"] for s in r.slots.values())
    superseded = sum(s.counters["obs_superseded"] for s in r.slots.values())
    assert len(served) + stale + superseded == 4 * 30  # every observation accounted for
    assert said and set(said) <= {f"obs_stale.{n}" for n in "abcd"}
    counters, _ = r.figures()
    assert sum(counters[f"robot.{n}.obs_stale"] for n in "abcd") == stale


def test_the_service_share_counts_observations_replaced_not_gaps_in_seq():
    """Admission's served share (missed: observations a newer one replaced, or expired) must
    not read a robot's other messages as missed: a robot publishes a trace after each
    observation on the same publisher, so its obs seqs go up by 2. Answered at once, none
    is missed; overloaded, the missed are exactly those superseded or stale."""
    r, _ = _robots()
    served = _play(r, {"a": 0, "b": 50}, cost_ms=5, seconds=2.0, bracketed="ab", seq_step=2)
    answered, missed = r.cost_model.take_service()
    assert answered == len(served) == 2 * 20 and missed == 0  # seq gaps: 40 read as missed
    r, _ = _robots()
    served = _play(
        r,
        {"a": 0, "b": 5, "c": 10, "d": 15},
        cost_ms=60,
        seconds=3.0,
        bracketed="abcd",
        seq_step=2,
    )
    answered, missed = r.cost_model.take_service()
    superseded = sum(s.counters["obs_superseded"] for s in r.slots.values())
    # (admission's once-a-second check took its share of the tally during the play)
    assert 0 < missed <= superseded + r.counters["obs_stale"] and answered <= len(served)
