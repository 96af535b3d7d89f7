"""The stress demo's threat, calibrated in place (rtinfer.cli.stress): the policy node alone on
one CPU with a nice-19 busy process, and a deadline from the chunk times of two short launched
runs (fixed full depth, and the cheapest budget level): the fixed run's p70, raised to the
cheapest level's p99 x 1.10, `separable` false when that floor is above the fixed p95. The choice is
pure (samples in, deadline out), so it is pinned here on given samples; the pinning runs on
real processes (no timing asserted)."""

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from rich.console import Console

from rtinfer.cli.stress import (
    AIM_Q,
    FLOOR_HEADROOM,
    calibration_seconds,
    choose_deadline,
    chunk_complete_ms,
    late_fraction,
    pin_tasks,
    policy_cpu,
    stress_table,
)

RNG = np.random.default_rng(0)
FULL = 8.0 + RNG.gamma(2.0, 2.0, 400)  # fixed full depth, chunk time: p50 ~11 ms, a long tail
CHEAP = 3.0 + RNG.gamma(2.0, 0.5, 400)  # the cheapest level: ~4 ms


def test_deadline_is_the_fixed_runs_p70_when_the_cheapest_level_fits_under_it():
    t = choose_deadline(FULL, CHEAP)
    assert AIM_Q == 0.70 and t.separable
    assert t.deadline_ms == pytest.approx(np.quantile(FULL, 0.70), abs=0.05)
    assert t.deadline_ms > np.quantile(CHEAP, 0.99) * FLOOR_HEADROOM
    assert 0.25 <= t.fixed_late <= 0.35 and t.cheapest_late == 0
    assert t.fixed_late == pytest.approx(np.mean(FULL > t.deadline_ms), abs=1e-4)
    assert "p70" in t.how and "launched stack" in t.how and t.samples == 400


def test_a_cheapest_level_near_full_depth_lifts_the_deadline_to_its_own_p99():
    cheap = np.linspace(11.0, 13.4, 400)  # p99 x 1.10 (~14.7) between the fixed p70 and p95
    full = np.linspace(5.0, 15.5, 400)
    t = choose_deadline(full, cheap)
    floor = np.quantile(cheap, 0.99) * FLOOR_HEADROOM
    assert np.quantile(full, 0.70) < floor <= np.quantile(full, 0.95)
    assert t.separable and t.deadline_ms == pytest.approx(floor, abs=0.05)
    assert t.fixed_late >= 0.05 and t.cheapest_late == 0
    assert "cheapest level's chunk-time p99" in t.how


def test_no_separating_deadline_is_said_not_hidden():
    t = choose_deadline(FULL, FULL + 3.0)  # the budget has nothing faster to offer here
    assert not t.separable and "no deadline separates" in t.how
    assert t.deadline_ms == pytest.approx(np.quantile(FULL, 0.70), abs=0.05)
    assert t.fixed_late >= 0.05 and t.cheapest_late > t.fixed_late


def test_a_given_deadline_is_kept_with_the_late_fractions_it_implies():
    t = choose_deadline(FULL, CHEAP, given_ms=12.0)
    assert t.deadline_ms == 12.0 and "--deadline-ms" in t.how
    assert t.fixed_late == pytest.approx(np.mean(FULL > 12.0), abs=1e-4)


@pytest.mark.parametrize("full,cheap", [([], [1.0]), ([1.0], []), ([float("nan")], [1.0])])
def test_no_usable_samples_is_a_value_error(full, cheap):
    with pytest.raises(ValueError, match="finite chunk-time samples"):
        choose_deadline(full, cheap)


def test_a_cycles_chunk_time_runs_to_its_last_waypoint_at_the_controller():
    ms = 1_000_000
    policy = [  # the policy node's trace: "end" = its last waypoint published
        {
            "node": "policy",
            "cycle": 1,
            "stamps": {"capture": 0, "first_token": 3 * ms, "end": 9 * ms},
        },
        {"node": "policy", "cycle": 2, "stamps": {"capture": 50 * ms, "end": 70 * ms}},
        {"node": "policy", "cycle": 3, "stamps": {"capture": 100 * ms, "end": 104 * ms}},
        {"node": "policy", "cycle": 4, "stamps": {"capture": 150 * ms}},  # never finished
        {"node": "policy", "cycle": 5},
    ]
    controller = [  # waypoint 0's transport per cycle: recv - publish (first record wins)
        {"cycle": 1, "stamps": {"capture": 0, "publish": 4 * ms, "recv": 5 * ms, "apply": 6 * ms}},
        {
            "cycle": 2,
            "stamps": {"capture": 50 * ms, "publish": 55 * ms, "recv": 57 * ms},
            "fields": {"late_index": 0},
        },
        {"cycle": 2, "stamps": {"capture": 50 * ms, "publish": 60 * ms, "recv": 69 * ms}},
        {"cycle": 4, "stamps": {"capture": 150 * ms, "publish": 151 * ms, "recv": 152 * ms}},
    ]  # cycle 3 never reached the controller: no sample
    assert sorted(chunk_complete_ms(policy, controller)) == [10.0, 22.0]


def test_calibration_runs_are_short_beside_the_demos_runs():
    assert calibration_seconds(2) == 6 and calibration_seconds(30) == 9.5
    assert calibration_seconds(600) == 10


def test_the_policy_node_is_pinned_to_the_cpu_the_load_shares(tmp_path):
    cpu = policy_cpu()
    assert cpu in os.sched_getaffinity(0)
    code = (
        "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); "
        "time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, "rtinfer.inference.node:main"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(1000):  # until its second thread has started (10 s at most)
            if len(os.listdir(f"/proc/{child.pid}/task")) >= 2:
                break
            time.sleep(0.01)
        assert pin_tasks(os.getpid(), "rtinfer.inference.node", cpu) == 1
        rest = (os.sched_getaffinity(0) - {cpu}) or {cpu}
        for tid in os.listdir(f"/proc/{child.pid}/task"):  # the main thread only on `cpu`
            assert os.sched_getaffinity(int(tid)) == ({cpu} if int(tid) == child.pid else rest)
        assert os.sched_getaffinity(other.pid) == os.sched_getaffinity(0)  # not its marker
    finally:
        for p in (child, other):
            p.kill()
            p.wait()


def test_the_two_runs_are_shown_side_by_side_with_the_threat():
    t = choose_deadline(FULL, CHEAP).report()
    t["load"] = "the policy node and 1 busy processes pinned to CPU 1"
    json.dumps(t)  # it goes into the JSON report as it is
    run = {
        "cycles": 600,
        "deadline_misses": 60,
        "late_waypoints": 90,
        "budget_changes": 0,
        "e2e_ms": {"p50": 9.0, "p99": 14.0, "max": 15.0},
        "holds": {"watchdog": 1},
        "objects": {"correct": 14, "wrong": 1, "missed": 0, "dropped": 0},
        "success_rate": 14 / 15,
    }
    budget = {**run, "deadline_misses": 3, "budget_changes": 2}
    assert late_fraction(run) == 0.1 and late_fraction(budget) == 0.005
    assert late_fraction({"cycles": 0, "deadline_misses": 0}) is None
    console = Console(record=True, width=160)
    console.print(stress_table({"calibration": t, "stress-fixed": run, "stress-budget": budget}))
    text = console.export_text()
    assert "fixed full depth" in text and "budget controller" in text
    assert "60 / 600 (10.0%)" in text and "3 / 600 (0.5%)" in text
    assert f"deadline {t['deadline_ms']:g} ms" in text and "14/15" in text
    assert "pinned to CPU 1" in text


# --- a policy near its deadline (rtinfer.cli.pressure) -----------------------------------------
MS = 1_000_000


def _policy(cycle, capture_ms, end_ms):
    return {
        "node": "policy",
        "cycle": cycle,
        "stamps": {"capture": int(capture_ms * MS), "end": int(end_ms * MS)},
    }


def _applied(cycle, capture_ms, recv_ms, apply_ms):
    return {
        "cycle": cycle,
        "stamps": {
            "capture": int(capture_ms * MS),
            "publish": int(recv_ms * MS),
            "recv": int(recv_ms * MS),
            "apply": int(apply_ms * MS),
        },
    }


def _late(cycle, capture_ms, recv_ms):
    return {
        "cycle": cycle,
        "stamps": {"capture": int(capture_ms * MS), "recv": int(recv_ms * MS)},
        "fields": {"late_index": 1.0},
    }


def test_a_certainly_late_cycle_the_controller_never_reported_is_counted_undetected():
    from rtinfer.cli.pressure import audit

    policy = [
        _policy(1, 0, 8),
        _policy(2, 50, 65),
        _policy(3, 100, 115),
        _policy(4, 150, 160.5),
        _policy(5, 200, 230),
    ]
    controller = [
        _applied(1, 0, 3, 4),
        _applied(2, 50, 53, 54),
        _late(2, 50, 66),
        _applied(3, 100, 104, 105),  # cycle 3: 15 ms at the policy, never reported
        _applied(4, 150, 153, 154),  # 10.5 ms: within CERTAIN_MS of the deadline
        _applied(6, 250, 259, 260.5),
    ]  # cycle 5 (30 ms) was sent before this record
    a = audit(policy, controller, deadline_ms=10.0)
    assert a == {
        "late_cycles": 1,
        "certainly_late": 3,
        "held": 0,
        "undetected": 2,
        "applied_cycles": 5,
        "stale_applied": 1,  # cycle 6: applied 10.5 ms after capture
        "stale_applied_max_ms": 0.5,
        "late_after_warmup": None,
    }  # 0.25 s of records
    # cycles captured before the controller's first trace record or after its last (the run
    # started or ended) are no evidence
    early = [_policy(0, -50, -20)]
    assert (
        audit(early + policy[:2] + [_policy(7, 300, 330)], controller[:3], 10.0)["undetected"] == 0
    )
    assert audit(policy, controller[:3] + [_late(3, 100, 116)], 10.0)["undetected"] == 0
    # nor is one whose last waypoint left after the controller's latest stamp: still in
    # flight when the run ended (captured before the controller's last capture)
    assert audit(policy + [_policy(8, 240, 265)], controller, 10.0)["undetected"] == 2
    # a cycle whose last waypoint left during an ordered hold is counted apart (the
    # controller rejects late waypoints then and reports none, by design)
    held = audit(policy, controller, 10.0, holds_ns=[(225 * MS, 240 * MS)])
    assert held["held"] == 1 and held["undetected"] == 1
    # the last publish, where the trace has it, is the evidence ("end" comes after it)
    on_time = {**policy[2], "stamps": {**policy[2]["stamps"], "last_publish": 109 * MS}}
    assert audit([on_time], controller, 10.0)["certainly_late"] == 0


def test_late_after_warmup_leaves_out_the_first_seconds():
    from rtinfer.cli.pressure import audit
    from rtinfer.cli.stress import WARMUP_S

    w = int(WARMUP_S * 1000)  # ms
    controller = (
        [_late(1, 0, 20), _applied(2, 50, 53, 54)]
        + [_applied(3 + i, w + 50 * i, w + 50 * i + 3, w + 50 * i + 4) for i in range(3)]
        + [_late(6, w + 150, w + 170)]
    )
    assert audit([], controller, 10.0)["late_after_warmup"] == 0.25  # 1 of cycles 3-6
    assert audit([], iter(controller), 10.0)["late_after_warmup"] == 0.25  # a trace file's reader


def test_hold_intervals_pair_each_safe_hold_with_its_clear():
    from rtinfer.cli.pressure import hold_intervals

    ev = [
        {"kind": "budget", "t_ns": 1},
        {"kind": "safe_hold", "t_ns": 10},
        {"kind": "clear", "t_ns": 20},
        {"kind": "safe_hold", "t_ns": 30},
    ]
    assert hold_intervals({"events": ev}) == [(10, 20), (30, float("inf"))]
    assert hold_intervals({}) == []


def _pair_results(fixed_late=60, budget_late=3, undetected=0, stale=0, sorted_budget=30):
    def run(misses, correct):
        return {
            "cycles": 1200,
            "deadline_misses": misses,
            "success_rate": correct / 30,
            "audit": {"undetected": undetected, "stale_applied": stale},
        }

    pair = {"fixed": run(fixed_late, 30), "budget": run(budget_late, sorted_budget)}
    return {"unpressured": {"success_rate": 1.0}, "nominal": pair, "stress": pair}


@pytest.mark.parametrize(
    "change,failing",
    [
        ({}, None),
        ({"fixed_late": 59}, "fixed full depth late"),
        ({"budget_late": 13}, "budget controller late"),
        ({"undetected": 1}, "not reported"),
        ({"stale": 1}, "applied past the deadline"),
        ({"sorted_budget": 29}, "sorting"),
    ],
)
def test_the_verdict_fails_each_target_on_its_own_figure(change, failing):
    from rtinfer.cli.pressure import verdict, verdict_lines

    v = verdict(_pair_results(**change))
    bad = [c["check"] for c in v["checks"] if not c["met"]]
    assert v["met"] == (failing is None)
    assert all(failing in b for b in bad) and (failing is None or bad)
    assert verdict_lines(v)[-1] == ("targets all met" if failing is None else "targets NOT all met")


def test_a_missing_run_is_no_met_target():
    from rtinfer.cli.pressure import verdict

    r = _pair_results()
    del r["stress"]
    assert not verdict(r)["met"]


def test_the_four_runs_are_shown_with_each_pairs_deadline():
    from rtinfer.cli.pressure import pressure_columns
    from rtinfer.cli.stress import runs_table

    r = _pair_results()
    for cond, ms in (("nominal", 7.5), ("stress", 16.25)):
        t = choose_deadline(FULL, CHEAP, given_ms=ms).report()
        r[cond] = {
            "calibration": t,
            **{
                role: {
                    **run,
                    "audit": {**run["audit"], "certainly_late": 4},
                    "e2e_ms": {"p50": 5.0},
                    "objects": {"correct": 30},
                }
                for role, run in r[cond].items()
            },
        }
    console = Console(record=True, width=220)
    console.print(runs_table("near", pressure_columns(r), deadline_row=True))
    text = console.export_text()
    assert "nominal: fixed full depth" in text and "stress: budget controller" in text
    assert "7.5 ms" in text and "16.25 ms" in text and "0 of 4 / 0" in text
    assert "60 / 1200 (5.0%)" in text and "3 / 1200 (0.2%)" in text


def test_a_roles_two_runs_pool_their_counts_and_their_worst_figures():
    from rtinfer.cli.pressure import pool

    def run(cycles, misses, correct, missed, late_after, stale_max, e2e_max, code=0):
        return {
            "exit_code": code,
            "deadline_ms": 20.0,
            "cycles": cycles,
            "deadline_misses": misses,
            "late_waypoints": misses,
            "budget_changes": 1,
            "budget_requests": 2,
            "objects": {"spawned": correct + missed, "correct": correct, "missed": missed},
            "holds": {"watchdog": 1, "ordered": 0},
            "e2e_ms": {"p50": 5.0, "max": e2e_max},
            "audit": {
                "late_cycles": misses,
                "certainly_late": misses,
                "held": 0,
                "undetected": 0,
                "applied_cycles": cycles - misses,
                "stale_applied": 0,
                "stale_applied_max_ms": stale_max,
                "late_after_warmup": late_after,
            },
        }

    p = pool([run(600, 30, 14, 1, 0.05, 0.0, 19.0), run(400, 4, 10, 5, 0.01, 0.0, 19.5, code=1)])
    assert (p["cycles"], p["deadline_misses"], p["late_fraction"]) == (1000, 34, 0.034)
    assert p["objects"]["correct"] == 24 and p["success_rate"] == 24 / 30
    assert p["audit"]["late_cycles"] == 34 and p["audit"]["applied_cycles"] == 966
    assert p["audit"]["late_after_warmup"] == round((0.05 * 600 + 0.01 * 400) / 1000, 4)
    assert p["e2e_ms"] == {"p50": None, "p99": None, "max": 19.5}
    assert p["exit_code"] == 1 and p["holds"]["watchdog"] == 2 and len(p["runs"]) == 2
    assert pool([]) == {}


def test_near_deadline_runs_each_load_in_the_order_fixed_budget_budget_fixed(monkeypatch, tmp_path):
    from rtinfer.cli import demo_stress

    calls = []

    def one(launch, base, name, seconds, overrides, *rest):
        calls.append(name)
        return {
            "exit_code": 0,
            "cycles": 100,
            "deadline_misses": 1,
            "deadline_ms": 20.0,
            "objects": {"correct": 1},
            "e2e_ms": {"max": 1.0},
        }

    monkeypatch.setattr(demo_stress, "one_run", one)
    monkeypatch.setattr(
        demo_stress, "calibrate", lambda *a, **k: (choose_deadline(FULL, CHEAP, given_ms=20.0), [])
    )
    monkeypatch.setattr(demo_stress, "policy_cpu", lambda: 0)
    out = demo_stress.near_deadline(
        tmp_path / "x.yaml",
        tmp_path,
        "m",
        None,
        1.0,
        {},
        Console(file=io.StringIO()),
        demo_stress.Stop(),
        None,
    )
    assert calls == ["unpressured"] + [
        f"{c}-{k + 1}-{r}"
        for c in ("nominal", "stress")
        for k, r in enumerate(("fixed", "budget", "budget", "fixed"))
    ]
    assert out["nominal"]["fixed"]["cycles"] == 200 and len(out["stress"]["budget"]["runs"]) == 2
