"""The stress demo's threat, chosen from measured chunk times (rtinfer.cli.stress): a deadline
the fixed full-depth policy misses at least 5% of the time and the cheapest budget level
meets. The choice is pure (samples in, deadline out), so it is pinned here on given samples;
`measure` runs the real ONNX policy for a few chunks (no timing asserted)."""
import json

import numpy as np
import pytest
from rich.console import Console

from rtinfer.cli.shipped import launch_file, zoo_model
from rtinfer.cli.stress import (DELIVERY_MS, choose_deadline, late_fraction, measure,
                                node_options, stress_table)
from rtinfer.launch.file import load

RNG = np.random.default_rng(0)
FULL = 8.0 + RNG.gamma(2.0, 2.0, 400)     # full depth: p50 ~11 ms, a long tail
CHEAP = 3.0 + RNG.gamma(2.0, 0.5, 400)    # the cheapest level: ~4 ms


def test_deadline_sits_below_the_fixed_runs_p95_and_above_the_cheapest_levels_time():
    t = choose_deadline(FULL, CHEAP)
    assert t.separable
    assert t.deadline_ms - DELIVERY_MS < np.quantile(FULL, 0.95)
    assert t.deadline_ms - DELIVERY_MS > np.quantile(CHEAP, 0.99)
    assert t.fixed_late >= 0.05 and t.cheapest_late <= 0.01
    assert t.fixed_late == pytest.approx(np.mean(FULL + DELIVERY_MS > t.deadline_ms), abs=1e-4)
    assert "p80" in t.how and t.samples == 400


def test_a_cheapest_level_near_full_depth_lifts_the_deadline_to_its_own_p99():
    cheap = np.linspace(11.0, 12.6, 400)  # its p99 x 1.15 is above the full depth's p80
    t = choose_deadline(FULL, cheap)
    floor = np.quantile(cheap, 0.99) * 1.15 + DELIVERY_MS
    assert t.separable and t.deadline_ms == pytest.approx(floor, abs=0.05)
    assert t.deadline_ms - DELIVERY_MS <= np.quantile(FULL, 0.90) + 0.05
    assert t.fixed_late >= 0.05 and "cheapest level's p99" in t.how


def test_no_separating_deadline_is_said_not_hidden():
    t = choose_deadline(FULL, FULL)  # the budget has nothing cheaper to offer
    assert not t.separable and "no deadline separates" in t.how
    assert t.deadline_ms == pytest.approx(np.quantile(FULL, 0.90) + DELIVERY_MS, abs=0.05)
    assert t.fixed_late >= 0.05


def test_a_given_deadline_is_kept_with_the_late_fractions_it_implies():
    t = choose_deadline(FULL, CHEAP, given_ms=12.0)
    assert t.deadline_ms == 12.0 and "--deadline-ms" in t.how
    assert t.fixed_late == pytest.approx(np.mean(FULL + DELIVERY_MS > 12.0), abs=1e-4)


@pytest.mark.parametrize("full,cheap", [([], [1.0]), ([1.0], []), ([float("nan")], [1.0])])
def test_no_usable_samples_is_a_value_error(full, cheap):
    with pytest.raises(ValueError, match="finite chunk-time samples"):
        choose_deadline(full, cheap)


def test_calibration_times_the_policy_as_the_launch_file_runs_it():
    spec = load(launch_file("conveyor_sorting.yaml"), {})
    policy = next(n for n in spec.nodes if n.name == "policy")
    opts = node_options(policy.args)
    assert opts == {"backend": "onnx", "threads": 1, "drafter": "chunk"}
    full, cheap = measure(zoo_model(), 3, **opts)  # the real ONNX graphs, a few chunks each
    assert len(full) == len(cheap) == 3
    assert all(x > 0 for x in full + cheap)


def test_the_two_runs_are_shown_side_by_side_with_the_threat():
    t = choose_deadline(FULL, CHEAP).report()
    json.dumps(t)  # it goes into the JSON report as it is
    run = {"cycles": 600, "deadline_misses": 60, "late_waypoints": 90, "budget_changes": 0,
           "e2e_ms": {"p50": 9.0, "p99": 14.0, "max": 15.0}, "holds": {"watchdog": 1},
           "objects": {"correct": 14, "wrong": 1, "missed": 0, "dropped": 0},
           "success_rate": 14 / 15}
    budget = {**run, "deadline_misses": 3, "budget_changes": 2}
    assert late_fraction(run) == 0.1 and late_fraction(budget) == 0.005
    assert late_fraction({"cycles": 0, "deadline_misses": 0}) is None
    console = Console(record=True, width=120)
    console.print(stress_table({"calibration": t, "stress-fixed": run, "stress-budget": budget}))
    text = console.export_text()
    assert "fixed full depth" in text and "budget controller" in text
    assert "60 / 600 (10.0%)" in text and "3 / 600 (0.5%)" in text
    assert f"deadline {t['deadline_ms']:g} ms" in text and "14/15" in text
