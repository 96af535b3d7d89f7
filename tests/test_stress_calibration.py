"""The stress demo's threat, calibrated in place (rtinfer.cli.stress): the policy node alone on
one CPU with a nice-19 busy process, and a deadline from the chunk times of two short launched
runs (fixed full depth, and the cheapest budget level): the fixed run's p70, raised to the
cheapest level's p99 x 1.10, `separable` false when that floor is above the fixed p95. The choice is
pure (samples in, deadline out), so it is pinned here on given samples; the pinning runs on
real processes (no timing asserted)."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from rich.console import Console

from rtinfer.cli.stress import (AIM_Q, FLOOR_HEADROOM, calibration_seconds, choose_deadline,
                                chunk_complete_ms, late_fraction, pin_tasks, policy_cpu, stress_table)

RNG = np.random.default_rng(0)
FULL = 8.0 + RNG.gamma(2.0, 2.0, 400)     # fixed full depth, chunk time: p50 ~11 ms, a long tail
CHEAP = 3.0 + RNG.gamma(2.0, 0.5, 400)    # the cheapest level: ~4 ms


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
        {"node": "policy", "cycle": 1, "stamps": {"capture": 0, "first_token": 3 * ms,
                                                  "end": 9 * ms}},
        {"node": "policy", "cycle": 2, "stamps": {"capture": 50 * ms, "end": 70 * ms}},
        {"node": "policy", "cycle": 3, "stamps": {"capture": 100 * ms, "end": 104 * ms}},
        {"node": "policy", "cycle": 4, "stamps": {"capture": 150 * ms}},  # never finished
        {"node": "policy", "cycle": 5},
    ]
    controller = [  # waypoint 0's transport per cycle: recv - publish (first record wins)
        {"cycle": 1, "stamps": {"capture": 0, "publish": 4 * ms, "recv": 5 * ms,
                                "apply": 6 * ms}},
        {"cycle": 2, "stamps": {"capture": 50 * ms, "publish": 55 * ms, "recv": 57 * ms},
         "fields": {"late_index": 0}},
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
    code = ("import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); "
            "time.sleep(30)")
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
    run = {"cycles": 600, "deadline_misses": 60, "late_waypoints": 90, "budget_changes": 0,
           "e2e_ms": {"p50": 9.0, "p99": 14.0, "max": 15.0}, "holds": {"watchdog": 1},
           "objects": {"correct": 14, "wrong": 1, "missed": 0, "dropped": 0},
           "success_rate": 14 / 15}
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
