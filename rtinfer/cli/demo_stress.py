"""`rtinfer demo --stress`: the deadline calibrated in place under load (calibrate), the
`cpu` runs (fixed full depth and the budget under SCHED_IDLE hogs on the policy's CPU; busy
neighbours without and with the launch file's scheduling) and `near-deadline`'s runs
(rtinfer.cli.pressure), each followed by its tables on the console."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rtinfer.cli.demo_launch import Stop, one_run, run_once
from rtinfer.cli.demo_options import launch_overrides
from rtinfer.cli.pressure import (
    CONDITIONS,
    ORDER,
    ROLES,
    pool,
    pressure_columns,
    verdict,
    verdict_lines,
)
from rtinfer.cli.stress import (
    CALIBRATE_DEADLINE_MS,
    HOGS,
    WARMUP_CYCLES,
    Threat,
    calibration_seconds,
    choose_deadline,
    chunk_complete_ms,
    load_line,
    percent_text,
    policy_cpu,
    runs_table,
    sorted_text,
)

CALIBRATION = (("calibrate-fixed", "--no-budget"), ("calibrate-cheapest", "--level=-1"))


def calibrate(
    launch: Path,
    base: Path,
    overrides: dict,
    cpu: int,
    deadline_ms: float | None,
    seconds: float,
    console: Console,
    stop: Stop,
    hogs: int = HOGS,
    prefix: str = "",
) -> tuple[Threat | None, list[str]]:
    """The stress threat (rtinfer.cli.stress), measured in place: two short runs of the
    launched stack under the load (the policy and `hogs` busy processes on `cpu`; 0: the
    policy alone there) at a loose deadline, at fixed full depth and pinned at the cheapest
    budget level (run directories <prefix>calibrate-fixed and -cheapest); their cycles' chunk
    times give the deadline (unless --deadline-ms gave one). (None, errors) if stopped or a
    run gave no samples."""
    cal_s = calibration_seconds(seconds)
    console.print(
        f"calibrating the deadline in place: {cal_s:g} s at fixed full "
        f"depth and {cal_s:g} s at the cheapest level, {load_line(hogs, cpu)}"
        " ...",
        highlight=False,
    )
    loose = launch_overrides(None, CALIBRATE_DEADLINE_MS, "cpu")
    samples, errors = [], []
    for name, budget in CALIBRATION:
        if stop.signum is not None:
            return None, errors
        rd = base / f"{prefix}{name}"
        rd.mkdir(parents=True, exist_ok=True)
        r = run_once(
            launch,
            cal_s,
            rd,
            {**overrides, **loose, "vars.budget": budget},
            console,
            f"rtinfer demo: {prefix}{name}",
            stop,
            stress=hogs,
            pin_cpu=cpu,
        )
        errors += [f"{name}: {ln}" for ln in r.get("error", [])]
        try:
            from rtinfer.realtime.trace import read_trace

            chunk_ms = chunk_complete_ms(
                read_trace(rd / "policy.trace"), read_trace(rd / "controller.trace")
            )
        except (OSError, ValueError):
            chunk_ms = []
        samples.append(chunk_ms[WARMUP_CYCLES:])  # the first WARMUP_S: start-up, no samples
    try:
        threat = choose_deadline(*samples, given_ms=deadline_ms)
    except ValueError:
        return None, errors
    threat = Threat(**{**threat.report(), "load": load_line(hogs, cpu)})
    console.print(
        f"{prefix.rstrip('-') or 'stress'} deadline {threat.deadline_ms:g} ms: "
        f"{threat.how}; in calibration {percent_text(threat.fixed_late)} of fixed "
        "full-depth cycles late, "
        f"{percent_text(threat.cheapest_late)} at the cheapest level",
        highlight=False,
    )
    return threat, errors


def near_deadline(
    launch: Path,
    base: Path,
    model: str,
    deadline_ms: float | None,
    seconds: float,
    task: dict,
    console: Console,
    stop: Stop,
    png: str | None,
) -> dict:
    """`--stress near-deadline` (rtinfer.cli.pressure): unpressured at the launch file's
    deadline, then per load of CONDITIONS a deadline calibrated under it and fixed full depth
    against the budget controller at it; the runs, their audits and the targets' verdict."""
    cpu = policy_cpu()
    out: dict = {
        "unpressured": one_run(
            launch,
            base,
            "unpressured",
            seconds,
            launch_overrides(model, None, None, **task),
            console,
            stop,
            png,
            False,
            0,
            cpu,
        )
    }
    for cond, hogs in CONDITIONS:
        if stop.signum is not None:
            break
        threat, errors = calibrate(
            launch,
            base,
            launch_overrides(model, None, None, **task),
            cpu,
            deadline_ms,
            seconds,
            console,
            stop,
            hogs,
            f"{cond}-",
        )
        for line in errors:
            console.print(f"[red]error[/red] {line}", highlight=False, soft_wrap=True)
        if threat is None:
            continue
        pair = out[cond] = {"calibration": threat.report()}
        overrides = launch_overrides(model, threat.deadline_ms, "near-deadline", **task)
        extras, done = dict(ROLES), {role: [] for role, _ in ROLES}
        for k, role in enumerate(ORDER):
            if stop.signum is None:
                done[role].append(
                    one_run(
                        launch,
                        base,
                        f"{cond}-{k + 1}-{role}",
                        seconds,
                        {**overrides, **extras[role]},
                        console,
                        stop,
                        png,
                        False,
                        hogs,
                        cpu,
                        threat.deadline_ms,
                    )
                )
        for role, runs in done.items():
            if runs:
                pair[role] = pool(runs)
    out["targets"] = verdict(out)
    console.print(
        runs_table(
            f"a policy near its deadline: fixed full depth vs the budget "
            f"controller, unpressured sorted {sorted_text(out['unpressured'])}",
            pressure_columns(out),
            deadline_row=True,
        )
    )
    for line in verdict_lines(out["targets"]):
        console.print(line, highlight=False)
    return out
