"""`rtinfer demo`: the conveyor-sorting demo as separate supervised processes, with a live
dashboard and a final report.

Runs a shipped launch file (conveyor_sorting.yaml: MuJoCo cell + PID layer, the learned
policy on ONNX Runtime, the deadline monitor; conveyor_vision.yaml, with the cell's camera
process, for a policy whose obs_spec.json has image inputs; conveyor_expert.yaml for
--policy expert)
through the launcher in a child process, watches every node's `health` for the dashboard,
then merges the nodes' reports. `--stress cpu` first calibrates its threat in place
(rtinfer.cli.stress): the policy node alone on one CPU with HOGS busy processes under
SCHED_IDLE, and two short launched runs under that load at a loose deadline (fixed full depth,
then pinned at the cheapest budget level with the node's --level) whose cycles' chunk times
(capture -> last waypoint at the controller) give the deadline: the fixed run's p70, raised
to the cheapest level's p99 x 1.1. Then it runs twice under that load and
deadline, a fixed full-depth policy and then the budget controller, and shows both side by
side (the budget's part); then twice with a busy process at normal priority on every CPU and
the budget on, under normal scheduling (the launch's realtime: false) and under the launch
file's SCHED_FIFO priorities (the scheduling's part). Two tables on stderr; the calibration
and the four runs in the JSON. --deadline-ms overrides
the calibrated deadline; the expert (no policy node to load) gets free-floating hogs and
STRESS_DEADLINE_MS. `--stress near-deadline` (rtinfer.cli.pressure; the learned policy only)
runs unpressured at the launch file's deadline, then for each load (nominal: the policy
node alone on its CPU; stress: as above) calibrates the deadline under it the same way and
runs fixed full depth against the budget controller at it; each pressured run is audited from
its traces (certainly late cycles not reported, cycles applied past the deadline) and the
JSON ends with the targets' verdict.

Output: stdout carries the final report as JSON and nothing else (one line with --json);
the dashboard, progress and errors go to stderr. Options and outputs are checked before
anything starts (exit 2). A failed run prints the launcher's failure lines and the failed
node's last log line, and exits 1; except `--stress cpu`'s busy-unscheduled run where the
robot's only failure is that no chunk came in time (the policy starved under normal
scheduling: that run's finding), said in one line and in its report's "starved".

Stopping: SIGINT (Ctrl-C) or SIGTERM is forwarded once to the launcher, which stops the
nodes in reverse order (each writes its report; the robot holds once the policy is gone);
the demo then prints the partial report and exits 128 + the signal. A second signal is
forwarded too (the launcher then skips the grace period). The launcher and the stress load
get PR_SET_PDEATHSIG, so if the demo dies by any means (SIGKILL too) the launcher stops
its nodes in order, and nothing the demo started outlives it.

Here: which runs, in order, and the report out. The parts: demo_options (the options checked,
and the launch file's overrides), demo_launch (one launched run, its dashboard and signals),
demo_stress (calibration, near-deadline), demo_report (the nodes' reports merged).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from rich.console import Console

from rtinfer.cli.demo_launch import Stop, one_run
from rtinfer.cli.demo_options import (
    DemoError,
    check_camera,
    check_fleet,
    check_options,
    check_record_option,
    check_stress,
    launch_overrides,
    model_dir,
    run_base,
    takes_frames,
)
from rtinfer.cli.demo_stress import calibrate, near_deadline
from rtinfer.cli.pressure import CONDITIONS
from rtinfer.cli.shipped import launch_file
from rtinfer.cli.stress import HOGS, policy_cpu, scheduling_table, stress_table
from rtinfer.realtime.report_file import write_report
from rtinfer.realtime.spin import on_signals

EXPERT_LAUNCH, MODEL_LAUNCH = "conveyor_expert.yaml", "conveyor_sorting.yaml"
VISION_LAUNCH = "conveyor_vision.yaml"  # a policy with image inputs: the camera node too
FLEET_LAUNCH = "conveyor_fleet.yaml"  # --robots N: N cells, one inference node


def run(
    seconds: float = 60.0,
    *,
    policy: str | None = None,
    report: str | None = None,
    png: str | None = None,
    stress: str | None = None,
    run_dir: str | None = None,
    deadline_ms: float | None = None,
    seed: int | None = None,
    instruction: str | None = None,
    belt_speed: float | None = None,
    json_out: bool = False,
    robots: int = 1,
    realtime: bool = True,
    record: str | None = None,
    camera_hz: float | None = None,
) -> int:
    """policy: None (the shipped model), "expert", or a model directory. deadline_ms: the
    end-to-end deadline (None: the launch file's; see launch_overrides). record: an .mcap
    file the run is recorded to (the launcher's --record; one run only). camera_hz: a camera
    policy's frame rate (None: the launch file's). Returns the exit
    status: 0, 1 (a run failed), 2 (refused before starting), 128 + signal (stopped)."""
    stop = Stop()
    with on_signals(stop):
        return _run(
            seconds,
            policy,
            report,
            png,
            stress,
            run_dir,
            deadline_ms,
            seed,
            instruction,
            belt_speed,
            json_out,
            stop,
            robots,
            realtime,
            record,
            camera_hz,
        )


def _run(
    seconds,
    policy,
    report,
    png,
    stress,
    run_dir,
    deadline_ms,
    seed,
    instruction,
    belt_speed,
    json_out,
    stop: Stop,
    robots: int = 1,
    realtime: bool = True,
    record: str | None = None,
    camera_hz: float | None = None,
) -> int:
    console = Console(stderr=True)
    try:
        check_options(seconds, deadline_ms, report, png)
        record = check_record_option(record, stress)
        check_fleet(robots, policy, stress, seed, instruction, png)
        model = model_dir(policy)
        check_stress(stress, model)
        vision = takes_frames(model)
        check_camera(vision, robots, camera_hz)
        base = run_base(run_dir)
    except DemoError as exc:
        print(f"rtinfer demo: {exc}", file=sys.stderr)
        return 2
    launch = launch_file(
        EXPERT_LAUNCH
        if model is None
        else FLEET_LAUNCH
        if robots > 1
        else VISION_LAUNCH
        if vision
        else MODEL_LAUNCH
    )
    # the launch settings every run of this demo shares (launch_overrides' keywords)
    task = {
        "seed": seed,
        "instruction": instruction,
        "belt_speed": belt_speed,
        "realtime": realtime,
        "camera_hz": camera_hz,
    }
    if stress == "near-deadline":
        out = near_deadline(
            launch, base.resolve(), str(model), deadline_ms, seconds, task, console, stop, png
        )
        runs_done = [out["unpressured"]] + [
            r for c, _ in CONDITIONS for k, r in out.get(c, {}).items() if k != "calibration"
        ]
    else:
        results = _runs(
            launch,
            base.resolve(),
            model,
            robots,
            stress,
            deadline_ms,
            seconds,
            task,
            console,
            stop,
            png,
            record,
        )
        runs_done = [r for k, r in results.items() if k != "calibration"]
        out = results.get("nominal", {}) if stress is None else results
    text = json.dumps(out, indent=None if json_out else 1)
    if report:
        why = write_report(Path(report).expanduser(), text + "\n")
        console.print(
            f"report not written to {report}: {why}" if why else f"report written to {report}"
        )
    print(text, flush=True)
    if stop.signum is not None:
        console.print(f"stopped by {signal.Signals(stop.signum).name}: partial report above")
        return 128 + stop.signum
    return 0 if runs_done and all(r["exit_code"] == 0 or r.get("starved") for r in runs_done) else 1


STARVED = "no action chunk was accepted in the whole run"  # the robot's last word then


def _starved(r: dict) -> str | None:
    """The busy-unscheduled run shows what normal scheduling does beside a busy neighbour:
    where the robot's only failure is that no chunk came in time (each rejected stale),
    that is the finding of the run, not a failure of the demo. Its one line, or None."""
    failed = [ln for ln in r.get("error", []) if "FAILED" in ln or "error" in ln.lower()]
    c = r.get("controller", {})
    if r["exit_code"] == 0 or not failed or not all(STARVED in ln for ln in failed):
        return None
    if c.get("chunks_accepted") != 0 or not c.get("rejected_stale"):
        return None
    return (
        f"no chunk arrived in time under normal scheduling ({c['rejected_stale']} "
        f"rejected stale): the policy node was starved, as this run shows"
    )


def _runs(
    launch,
    base,
    model,
    robots,
    stress,
    deadline_ms,
    seconds,
    task,
    console,
    stop,
    png,
    record: str | None = None,
) -> dict:
    """The plain demo ({"nominal": run}) or `--stress cpu` (calibration, stress-fixed,
    stress-budget: the budget's part; busy-unscheduled, busy-scheduled: the scheduling's)."""
    overrides = launch_overrides(None if model is None else str(model), deadline_ms, stress, **task)
    if robots > 1:
        overrides["robots"] = str(robots)
    runs, threat, cpu = [("nominal", {}, 0, True)], None, None
    if stress == "cpu":
        # the expert has no policy node to load: free-floating hogs, STRESS_DEADLINE_MS
        n = 2 * (os.cpu_count() or 2) if model is None else HOGS
        # the budget's part (hogs under SCHED_IDLE on the policy's CPU), then the
        # scheduling's: a CPU-bound neighbour at normal priority on every CPU, the budget on
        busy = len(os.sched_getaffinity(0))
        runs = [
            ("stress-fixed", {"vars.budget": "--no-budget"}, n, True),
            ("stress-budget", {}, n, True),
            ("busy-unscheduled", {"realtime": "false"}, busy, False),
            ("busy-scheduled", {}, busy, False),
        ]
        if model is not None:
            cpu = policy_cpu()
            threat, errors = calibrate(
                launch, base, overrides, cpu, deadline_ms, seconds, console, stop
            )
            for line in errors:
                console.print(f"[red]error[/red] {line}", highlight=False, soft_wrap=True)
            if threat is not None:
                overrides = launch_overrides(str(model), threat.deadline_ms, stress, **task)
    results = {}
    for name, extra, hogs, on_policy_cpu in runs:
        if stop.signum is not None:
            break
        ov = {**overrides, **extra}
        results[name] = one_run(
            launch,
            base,
            name,
            seconds,
            ov,
            console,
            stop,
            png,
            len(runs) == 1,
            hogs,
            cpu if on_policy_cpu else None,
            float(ov["deadline_ms"]) if len(runs) > 1 else None,
            record if len(runs) == 1 else None,
        )
    bu = results.get("busy-unscheduled")
    if bu is not None and (why := _starved(bu)) is not None:
        bu["starved"] = why
        console.print(f"busy-unscheduled: {why}", highlight=False, soft_wrap=True)
    if len(runs) > 1:
        results = {"calibration": None if threat is None else threat.report(), **results}
        console.print(stress_table(results))
        console.print(scheduling_table(results))
    return results
