"""Monitor, `rtinfer report` and dashboard state one run's figures alike (issue 15, item 10):
a real launch (sim + scripted expert + monitor as processes), its monitor report against
`rtinfer report`'s reading of the controller trace, and the dashboard's final counts against
the monitor's JSON."""

from __future__ import annotations

import pytest
from cell_run import run_cell

from rtinfer.monitor import report
from rtinfer.monitor.stages import STAGES

EXPERT = "launch/conveyor_expert.yaml"


def test_monitor_and_report_agree_on_every_stage_within_5_percent():
    run = run_cell(EXPERT)
    mon = run.monitor["stages_ms"]
    lat, _start, n = report.stage_latencies(run.trace)
    assert n == len(run.trace) > 50
    for name, _, _ in STAGES:
        assert name in lat, f"the trace gives no {name} sample"
        ours = report.summarize(lat[name])
        for q in ("p50", "p99"):
            # HdrHistogram keeps 3 digits: compare with 1 us of slack besides the 5 %
            assert mon[name][q] == pytest.approx(ours[q], rel=0.05, abs=1e-3), (
                name,
                q,
                mon[name],
                ours,
            )
        # one host: nothing is moved by a clock estimate, so nothing goes negative
        assert mon[name]["clamped"] == ours["clamped"] == 0, (name, mon[name])


def test_one_host_stamps_are_compared_as_they_are():
    run = run_cell(EXPERT)
    for node, clock in run.monitor["clocks"].items():
        assert clock["samples"] > 0 and clock["applied_ms"] == 0.0, (node, clock)


def test_the_dashboards_final_counts_are_the_monitors_report():
    run = run_cell(EXPERT)
    health, rep = run.dashboard["monitor"], run.monitor
    assert health["state"] == "stopped"  # the monitor's last word, from its report's summary
    c = health["counters"]
    assert (c["cycles"], c["misses"], c["holds"]) == (rep["cycles"], rep["misses"], rep["holds"])
    assert c["late_cycles"] == rep["late_cycles"]
    assert c["budget_requests"] == rep["budget"]["requests"]
    assert c.get("budget_changes") == rep["budget"]["changes"]  # the expert applies none
    for name, _, _ in STAGES:
        assert c[f"{name}_clamped"] == rep["stages_ms"][name]["clamped"]
    assert rep["cycles"] == len({(r["cycle"], r["stamps"]["capture"]) for r in run.trace})
