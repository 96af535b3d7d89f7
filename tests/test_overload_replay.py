"""Overload on one node, replayed: the real Robots on a simulated clock (rtinfer.bench.
overload_replay), fed arrivals at fixed phases and cycles of fixed or recorded costs, so the
verdicts are counts and bounds that do not depend on this machine's speed.

A robot phase-locked behind others is not starved (the deadline order served it every cycle,
each one too late); overload degrades to cheaper levels and lower observation rates before
refusing; every admitted robot gets a chunk in time within its staleness limit."""

from __future__ import annotations

import random

import pytest

from rtinfer.bench.overload_replay import CostModel, replay, synthetic
from rtinfer.inference.budget import Budget, BudgetLevel
from rtinfer.inference.robots import Robots

MS = 1_000_000
DEADLINE_NS = 100 * MS


def _robots(levels: int, period_ms: float, said: list | None = None, **kw) -> Robots:
    return Robots(
        Budget([BudgetLevel(6 - i, 0, 4) for i in range(levels)], DEADLINE_NS),
        remote=False,
        period_ns=int(period_ms * MS),
        **kw,
        say=lambda kind, text, error=True: (
            said is not None and said.append((kind, text() if callable(text) else text))
        ),
    )


def test_a_robot_phase_locked_behind_others_is_answered_in_time_in_its_turn():
    # five robots at 10 Hz, 5 ms apart, admitted before any cycle was timed; each cycle then
    # takes 24 ms: 120 ms of work per 100 ms. The deadline order served r2 every cycle and
    # each of its chunks ended past the deadline: 18 of 200 in time in 20 s, a gap of 1.2 s,
    # while r0 had all 200 (the starved robot of the fleet bench). A cycle that would end
    # late is not run, and no robot waits behind the others for ever.
    arrivals = synthetic(
        {f"r{i}": 10.0 for i in range(5)}, 20.0, phases_ns={f"r{i}": 5 * i * MS for i in range(5)}
    )
    r = _robots(1, 100)
    res = replay(r, arrivals, CostModel([24 * MS]), deadline_ns=DEADLINE_NS, profile=False)
    applied = {n: p["applied"] for n, p in res["robots"].items()}
    assert min(applied.values()) * 2 >= max(applied.values()), applied
    assert res["late"] == 0  # no cycle the robot would reject
    assert res["worst_gap_ms"] <= 2 * 200, res["robots"]  # limit: deadline + its interval
    assert res["refused"] == 0


def _fleet(n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    return {f"r{i}": rng.choice([10.0, 15.0, 20.0]) for i in range(n)}


@pytest.mark.parametrize("n", [16, 19])
def test_twice_the_full_quality_load_degrades_and_every_robot_keeps_its_staleness_limit(n):
    # levels of 8, 4 and 2 ms, one cycle in 16 preempted to 1.3x or 2x: about 8 robots at
    # 10-20 Hz fit at full quality; 16-19 are served at cheaper levels, none refused, every
    # chunk in time and no robot without one for longer than its staleness limit (20 fill
    # the cheapest level's 40 ms exactly, once its own cycles price it: the timer's
    # resolution then decides)
    said = []
    arrivals = synthetic(_fleet(n, n), 10.0, seed=n, jitter_ns=2 * MS)
    offered = len(arrivals) / 10.0
    r = _robots(3, 50, said)
    res = replay(
        r,
        arrivals,
        CostModel([8 * MS, 4 * MS, 2 * MS], spread=[1.0] * 14 + [1.3, 2.0]),
        deadline_ns=DEADLINE_NS,
    )
    assert res["refused"] == 0 and res["late"] == 0
    assert res["worst_over_limit"] <= 1.0, res["robots"]
    assert res["goodput_hz"] >= 0.95 * offered
    assert res["level_mix"].get("0", 0) < 0.5  # degraded, not refused
    assert any(kind == "load_level" for kind, _ in said)
    counters, _ = r.figures()
    assert counters["load_level"] >= 1 and counters["capacity"] >= n > counters["capacity_full"]


def test_when_the_cheapest_level_does_not_fit_the_robots_are_asked_for_fewer_observations():
    # one level of 20 ms, a 10 Hz policy: 4 robots fit its window (4 x 20 <= 80 ms), but they
    # publish at 20 Hz, twice what the node can answer: each is asked for a period twice its
    # own, said in its health, and robots that honour it get every chunk in time
    arrivals = synthetic({f"r{i}": 20.0 for i in range(4)}, 10.0, seed=1)
    r = _robots(1, 100)
    res = replay(r, arrivals, CostModel([20 * MS]), deadline_ns=DEADLINE_NS)
    asked = [s.asked_period_ns for s in r.slots.values()]
    assert all(a is not None and 95 * MS <= a <= 110 * MS for a in asked), asked
    _, gauges = r.figures()
    assert all(f"robot.r{i}.obs_period_asked_us" in gauges for i in range(4))
    assert res["refused"] == 0 and res["late"] == 0 and res["worst_over_limit"] <= 1.0


def test_a_robot_the_cheapest_level_cannot_serve_is_refused_once_with_the_figure():
    said = []
    r = _robots(2, 50, said)
    r.set_profile({1: 20 * MS})
    r.cost_model.set_level_profile({0: 20 * MS, 1: 10 * MS})  # the cheapest fits 4 of 40 ms
    for seq in range(1, 4):
        for i in range(5):
            r.offer(_obs(f"r{i}", seq), seq * MS, DEADLINE_NS)
    assert set(r.slots) == {"r0", "r1", "r2", "r3"} and set(r.refused) == {"r4"}
    lines = [text for kind, text in said if kind == "refused.r4"]
    assert len(lines) == 1 and "at its cheapest budget level (1)" in lines[0]
    assert "this node fits 4" in lines[0]
    assert r.counters["robots_refused"] == 1 and r.counters["obs_refused"] == 3


def test_a_level_is_priced_by_its_profile_until_enough_of_its_cycles_are_timed():
    r = _robots(3, 50)
    costs = r.cost_model
    costs.set_level_profile({0: 10 * MS, 1: 5 * MS})
    assert costs.ratio(1) == pytest.approx(0.5) and costs.ratio(2) == 1.0  # 2: unknown
    for _ in range(16):
        costs.record(1, 0, 8 * MS)
        costs.record(1, 1, 6 * MS)
    assert costs.ratio(1) == pytest.approx(0.75, rel=1e-2)
    assert costs.batch_ns(1, median=True, level=1) == pytest.approx(6 * MS, rel=1e-2)


def test_a_level_run_alone_is_priced_by_its_own_cycles_not_by_a_busy_start():
    # a busy start-up: full quality's first cycles took 66 ms; the load then put every robot
    # on the cheapest level, which runs in 3 ms. Priced off those first cycles (66 ms x its
    # profiled ratio) the node fitted 2 robots for good, and refused the rest all run long
    from rtinfer.inference.cycle_cost import FRESH_RECORDS, Costs

    costs = Costs(3)
    costs.set_level_profile({0: 10 * MS, 1: 5 * MS, 2: 2.5 * MS})
    for ns in (40, 66, 90):
        costs.record(1, 0, ns * MS)
    for _ in range(FRESH_RECORDS + 1):
        costs.record(1, 2, 3 * MS)
    assert costs.batch_ns(1, median=True, level=2) == pytest.approx(3 * MS, rel=1e-2)
    assert costs.batch_ns(1, median=True) == pytest.approx(12 * MS, rel=1e-2)  # 3 / 0.25
    assert costs.delay_ns() == 0  # the busy start's spread is stale too
    assert costs.capacity(40 * MS, level=2) == 13


def test_a_node_starved_of_cpu_reports_the_robots_it_served_not_its_fast_cycles():
    # two robots at 20 Hz, cycles timed at 1 ms: the costs fit dozens. The node is then
    # starved (a neighbour takes its CPU): it takes up an observation now and then, too old
    # to answer or superseded by then, and runs almost nothing, so no slow cycle is timed
    said = []
    r = _robots(1, 50, said)
    for _ in range(20):
        r.record_cost(1, 0, 1 * MS)

    def phase(seq0: int, t: int, take) -> int:
        """3 s of observations of each robot, 50 ms apart, the load checked after each (as
        the node does at its health rate); take(seq) -> how late the node takes them up
        (None: not at all, so the next supersedes it)."""
        for seq in range(seq0, seq0 + 60):
            t += 50 * MS
            for name in ("r0", "r1"):
                r.offer(_obs(name, seq, t), t, DEADLINE_NS)
            late = take(seq)
            for _ in range(0 if late is None else 2):  # one robot a cycle
                for s in r.next_batch(DEADLINE_NS, t + late, 1):
                    s.waiting = None  # the node's encode takes it
            r.check_load(DEADLINE_NS)
        return t

    t = phase(1, 0, lambda seq: 0)  # every observation answered at once
    assert r.figures()[0]["capacity"] >= 20 and not r.overloaded
    t = phase(61, t, lambda seq: 150 * MS)  # each taken up past its deadline: expired
    assert r.figures()[0]["capacity"] == 1 and r.overloaded
    assert any(
        kind == "overloaded" and "observations went unanswered" in text for kind, text in said
    )
    t = phase(121, t, lambda seq: 0)  # served again: its costs decide again
    assert r.figures()[0]["capacity"] >= 20 and not r.overloaded
    t = phase(181, t, lambda seq: 0 if seq % 4 == 0 else None)  # one in four taken up
    assert r.figures()[0]["capacity"] == 1 and r.overloaded


def test_an_unknown_rule_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="one of edf, llf, wait"):
        _robots(1, 50, rule="fifo")


def _obs(name: str, seq: int, capture_ns: int | None = None):
    from rtinfer.transport.wire import Envelope

    stamps = {} if capture_ns is None else {"capture": capture_ns, "recv": capture_ns}
    return Envelope(2, "obs", seq, name, stamps, {})


def test_the_bench_replays_every_rule_on_the_same_arrivals(tiny_model_dir, capsys):
    import json

    from rtinfer.bench.overload import RULES, main

    assert (
        main(
            [
                "--model",
                str(tiny_model_dir),
                "--quick",
                "--robots",
                "1",
                "6",
                "--rates-hz",
                "10",
                "20",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert len(result["calibration"]["level_ms"]) == len(result["calibration"]["levels"])
    assert [row["robots"] for row in result["rows"]] == [1, 6]
    for row in result["rows"]:
        assert set(row["rules"]) == set(RULES)
        for figures in row["rules"].values():
            assert figures["goodput_hz"] <= row["offered_hz"] + 1e-6
    assert set(result["summary"]) == set(RULES) and len(result["loadavg"]) == 3


def test_a_fixed_budget_keeps_its_level_under_overload_and_drops_what_would_end_late():
    # --no-budget (full quality, fixed): 16 robots at 2x what level 0 serves are never
    # answered at a cheaper level, a cycle that would end late is not run, and the robots are
    # asked for fewer observations instead
    budget = Budget([BudgetLevel(6 - i, 0, 4) for i in range(3)], DEADLINE_NS, auto=False)
    r = Robots(budget, remote=False, period_ns=50 * MS, say=lambda *a, **k: None)
    arrivals = synthetic(_fleet(16, 16), 5.0, seed=16, jitter_ns=2 * MS)
    res = replay(
        r, arrivals, CostModel([8 * MS, 4 * MS, 2 * MS]), deadline_ns=DEADLINE_NS, profile=False
    )
    assert set(res["level_mix"]) == {"0"} and res["late"] == 0
    assert all(s.asked_period_ns for s in r.slots.values())
