"""The demo's merged report and its dashboard, from real files and real health messages."""

import json
import os
import re
import time

import pytest

from rtinfer.cli.demo_report import collect_report
from rtinfer.monitor.dashboard import Dashboard
from rtinfer.transport.bus import Publisher

REPORT_KEYS = {
    "cycles",
    "deadline_ms",
    "deadline_misses",
    "e2e_ms",
    "ttft_ms",
    "objects",
    "success_rate",
    "budget_changes",
    "holds",
}


def test_report_merges_sim_and_monitor_reports_with_the_documented_keys(tmp_path):
    (tmp_path / "sim_report.json").write_text(
        json.dumps(
            {
                "metrics": {
                    "spawned": 10,
                    "correct": 6,
                    "wrong": 1,
                    "missed": 1,
                    "dropped": 0,
                    "resolved": 8,
                },
                "controller": {"holds": 2},
                "sim_s": 20.0,
            }
        )
    )
    (tmp_path / "monitor_report.json").write_text(
        json.dumps(
            {
                "cycles": 400,
                "deadline_ms": 100.0,
                "misses": 0,
                "holds": 0,
                "budget": {"changes": 1},
                "stages_ms": {
                    "e2e": {"p50": 5.0, "p99": 9.0, "max": 12.0},
                    "ttft": {"p50": 2.0, "p99": 3.0},
                },
            }
        )
    )
    r = collect_report(tmp_path, {}, 0)
    assert REPORT_KEYS <= set(r)
    assert r["success_rate"] == 6 / 8 and r["objects"]["correct"] == 6
    assert r["e2e_ms"] == {"p50": 5.0, "p99": 9.0, "max": 12.0} and r["deadline_misses"] == 0
    assert r["holds"] == {"watchdog": 2, "ordered": 0}


def test_missing_reports_give_a_report_without_invented_figures(tmp_path):
    r = collect_report(tmp_path, {}, 1)
    assert r["exit_code"] == 1 and r["success_rate"] is None and r["deadline_misses"] is None


def test_dashboard_shows_the_latest_health_of_each_node(tmp_path):
    ep = f"ipc://{tmp_path}/health"
    pub = Publisher(ep, "test")
    dash = Dashboard([ep])
    try:
        bodies = [
            {"node": "cell", "state": "run", "counters": {"correct": 7, "wrong": 1}, "gauges": {}},
            {
                "node": "monitor",
                "state": "ok",
                "counters": {"misses": 0, "cycles": 50},
                "gauges": {"e2e_p50_ms": 4.0, "e2e_p99_ms": 8.0, "e2e_max_ms": 9.0},
            },
        ]
        deadline = time.monotonic() + 10
        while set(dash.latest) != {"cell", "monitor"} and time.monotonic() < deadline:
            for b in bodies:
                pub.publish("health", b)
            dash.poll(50)
        table = dash.render()
        cells = [str(c) for col in table.columns for c in col._cells]
        assert "7 / 1 / 0 / 0" in cells and "4.0 / 8.0 / 9.0 ms" in cells
    finally:
        dash.close()
        pub.close()


def test_stress_runs_at_a_tighter_deadline_with_margins_scaled_to_it():
    from rtinfer.cli.demo_options import STRESS_DEADLINE_MS, launch_overrides
    from rtinfer.launch.file import load
    from rtinfer.monitor.policy import MonitorConfig

    assert launch_overrides(None, None, None) == {}
    o = launch_overrides("models/zoo/x", None, "cpu")
    assert o["vars.model"] == "models/zoo/x" and float(o["deadline_ms"]) == STRESS_DEADLINE_MS
    o = launch_overrides(None, 40.0, "cpu")
    spec = load("launch/conveyor_sorting.yaml", o)
    cfg = MonitorConfig.from_dict({**spec.monitor, "deadline_ms": spec.deadline_ms})
    assert spec.deadline_ms == 40 and (cfg.shed_margin_ms, cfg.restore_margin_ms) == (8, 20)
    # --no-realtime: the shipped file's priorities are not applied
    assert spec.realtime and [(n.name, n.priority) for n in spec.nodes] == [
        ("monitor", None),
        ("sim", 10),
        ("policy", 5),
    ]
    assert not load(
        "launch/conveyor_sorting.yaml", launch_overrides(None, None, None, realtime=False)
    ).realtime


def test_loop_rate_comes_from_the_controllers_health_and_holds_after_it_stops(tmp_path):
    ep = f"ipc://{tmp_path}/health"
    pub = Publisher(ep, "test")
    dash = Dashboard([ep])

    def send(ticks):
        body = {"node": "controller", "state": "run", "counters": {"ticks": ticks}, "gauges": {}}
        end = time.monotonic() + 10
        while dash._ctl[1] != ticks and time.monotonic() < end:
            pub.publish("health", body)
            dash.poll(20)

    try:
        send(1000)
        dash.render()
        t0 = dash._ctl[0]
        time.sleep(0.6)
        send(1600)
        dash.render()
        hz = 600 / (dash._ctl[0] - t0)
        assert dash.loop_hz == hz and 0 < hz <= 600 / 0.6  # 600 ticks in at least 0.6 s
        time.sleep(0.6)  # the controller has stopped: no more health
        dash.render()
        assert dash.loop_hz == hz
    finally:
        dash.close()
        pub.close()


@pytest.mark.slow
def test_stress_calibrates_its_deadline_then_runs_both_halves_end_to_end(tmp_path):
    """`--stress cpu` briefly, as a user runs it: the threat is measured first, in place (two
    short launched runs under the load), both runs use its deadline, and stdout is the one
    JSON report with the calibration and both runs."""
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "demo",
            "--stress",
            "cpu",
            "--seconds",
            "2",
            "--json",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert list(report) == [
        "calibration",
        "stress-fixed",
        "stress-budget",
        "busy-unscheduled",
        "busy-scheduled",
    ]
    threat = report["calibration"]
    assert threat["samples"] >= 40 and threat["how"]
    assert threat["full_ms"]["p50"] > 0 and threat["cheapest_ms"]["p50"] > 0
    # the policy node shares one named CPU with the load (rtinfer.cli.stress.load_line)
    assert re.search(
        r"policy node alone with \d+ busy process\(es\) under SCHED_IDLE on CPU \d+", threat["load"]
    ), threat["load"]
    # calibrated in place: two launched runs, fixed full depth and pinned at the cheapest level
    run = tmp_path / "run"
    fixed = json.loads((run / "calibrate-fixed" / "monitor_report.json").read_text())
    cheap = json.loads((run / "calibrate-cheapest" / "monitor_report.json").read_text())
    assert fixed["budget"]["applied_level"] == 0 and cheap["budget"]["applied_level"] == 4
    assert fixed["budget"]["changes"] == cheap["budget"]["changes"] == 0
    for name in ("stress-fixed", "stress-budget", "busy-unscheduled", "busy-scheduled"):
        # normal scheduling beside a busy neighbour may starve the policy of every chunk in
        # time on a loaded machine: that run's finding, said as "starved", not a failure
        starved = name == "busy-unscheduled" and "policy node was starved" in str(
            report[name].get("starved")
        )
        assert report[name]["exit_code"] == 0 or starved, report[name].get("error")
        assert report[name]["deadline_ms"] == threat["deadline_ms"]
        assert "late_fraction" in report[name]
    # the scheduling's part: the same launch without, then with, its SCHED_FIFO priorities
    assert report["busy-unscheduled"]["scheduling"] == {}
    assert set(report["busy-scheduled"]["scheduling"]) == {"sim", "policy"}
    assert "fixed full depth" in r.stderr and "budget controller" in r.stderr
    assert "the scheduling's part" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_stress_load_is_pinned_to_the_policys_cpu():
    """The busy processes share the policy node's CPU (rtinfer.cli.stress.policy_cpu)."""
    from rtinfer.cli.demo_launch import busy_processes
    from rtinfer.cli.stress import policy_cpu

    cpu = policy_cpu()
    hogs = busy_processes(1, 30, cpu)
    try:
        for _ in range(1000):  # until the hog has pinned itself (10 s at most)
            if os.sched_getaffinity(hogs[0].pid) == {cpu}:
                break
            time.sleep(0.01)
        assert os.sched_getaffinity(hogs[0].pid) == {cpu}
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def test_a_fleet_report_keeps_an_entry_for_a_cell_that_ended_early_and_names_its_missing_report(
    tmp_path,
):
    (tmp_path / "sim_report-0.json").write_text(
        json.dumps(
            {
                "metrics": {"spawned": 3, "correct": 2, "resolved": 2},
                "controller": {"chunks_accepted": 90},
                "task": {"seed": 0},
            }
        )
    )
    (tmp_path / "monitor_report.json").write_text(
        json.dumps(
            {
                "cycles": 120,
                "misses": 0,
                "robots": {
                    "controller-0": {"cycles": 90, "misses": 0},
                    "controller-1": {"cycles": 30, "misses": 0},
                },
            }
        )
    )
    why = "required node 'sim-1' failed for good (killed by SIGKILL, 0 restarts)"
    (tmp_path / "launch_summary.json").write_text(json.dumps({"robots_ended": {"1": why}}))
    r = collect_report(tmp_path, {}, 3, robots=2)
    assert [(c["robot"], c["cycles"], c["ended"]) for c in r["robots"]] == [
        ("cell-0", 90, None),
        ("cell-1", 30, why),
    ]
    assert (
        r["reports_missing"] == ["sim_report-1.json"] and r["controller"]["chunks_accepted"] == 90
    )


def test_reports_a_full_disk_kept_out_are_named_and_the_monitors_last_health_counts(tmp_path):
    latest = {"monitor": {"state": "stopped", "counters": {"cycles": 600, "misses": 1}}}
    r = collect_report(tmp_path, latest, 0)
    assert r["reports_missing"] == ["monitor_report.json", "sim_report.json"]
    assert r["cycles"] == 600 and r["deadline_misses"] == 1


def test_the_report_carries_the_robots_clamps_and_socket_drops(tmp_path):
    """Issue 29: a policy 100x past the limits was clipped 20,000 times with nothing in
    `rtinfer demo --json`; the robot's stack and bus counters are in it, summed over cells."""
    for k in (0, 1):
        (tmp_path / f"sim_report-{k}.json").write_text(
            json.dumps(
                {
                    "metrics": {"spawned": 1},
                    "controller": {"chunks_accepted": 10},
                    "stack": {"waypoint_clamps": 4650 + k, "workspace_clamps": 15733},
                    "bus": {"sub.rejected": k, "pub.dropped": 0},
                }
            )
        )
    (tmp_path / "monitor_report.json").write_text(json.dumps({"cycles": 20, "misses": 0}))
    r = collect_report(tmp_path, {}, 0, robots=2)
    assert r["stack"] == {"waypoint_clamps": 9301, "workspace_clamps": 31466}
    assert r["bus"] == {"sub.rejected": 1, "pub.dropped": 0}
    one = tmp_path / "one"
    one.mkdir()
    (one / "sim_report.json").write_text(json.dumps({"stack": {"effort_clamps": 3}}))
    assert collect_report(one, {}, 0)["stack"] == {"effort_clamps": 3}


def test_the_report_says_what_scheduling_each_node_was_granted(tmp_path):
    import subprocess
    import sys

    from rtinfer.cli.demo_report import scheduling

    # the real child, as the launcher starts it, its output in the node's log
    for name, opts in (
        ("sim", ["--priority", "1"]),
        ("policy", ["--cpus", "100000"]),
        ("monitor", []),
    ):
        with open(tmp_path / f"{name}.log", "w") as log:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rtinfer.launch.child",
                    "--name",
                    name,
                    *opts,
                    "--",
                    "tests.launch_fixtures:echo_args",
                    str(tmp_path / "x"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=60,
            )
    got = scheduling(tmp_path)
    assert set(got) == {"sim", "policy"}  # the monitor asked for neither
    assert got["sim"].startswith("affinity skipped") and "scheduler " in got["sim"]
    assert "affinity OSError" in got["policy"] and "scheduler skipped" in got["policy"]
    assert collect_report(tmp_path, {}, 0)["scheduling"] == got
