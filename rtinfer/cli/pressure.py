"""`rtinfer demo --stress near-deadline`: the deadline guarantee for a policy that is itself
near its deadline, judged from the runs' own traces.

One invocation runs the shipped policy unpressured (the launch file's deadline: the sorting
baseline), then under each load of CONDITIONS (nominal: the policy node alone on its CPU;
stress: HOGS busy processes there under SCHED_IDLE, rtinfer.cli.stress) calibrates a deadline
from the policy's own chunk time under that load (rtinfer.cli.stress.choose_deadline) and runs
fixed full depth (--no-budget) against the budget controller at it, in the order ORDER
(fixed, budget, budget, fixed: a load that drifts during the four runs weighs on both roles
alike), each role's two runs pooled (`pool`). One deadline cannot serve both loads: the load
slows even the cheapest level past full depth's unloaded chunk.

`audit` reads a run's traces: a cycle whose last waypoint left the policy node more than
CERTAIN_MS past the deadline was certainly late, so the controller must have reported it
(a `late_index` record, which the monitor counts) unless the monitor had ordered a hold
(the controller then rejects late waypoints without a report); and no cycle was applied past
the deadline. `verdict` checks the targets. Pure: records in, figures out.
"""

from __future__ import annotations

from rtinfer.cli.stress import HOGS, WARMUP_S, late_fraction
from rtinfer.realtime.deadline import deadline_ns as to_ns

CONDITIONS = (("nominal", 0), ("stress", HOGS))  # (name, busy processes on the policy's CPU)
ROLES = (("fixed", {"vars.budget": "--no-budget"}), ("budget", {}))  # launch overrides
ORDER = ("fixed", "budget", "budget", "fixed")  # ABBA: drift in the load cancels between roles
BUDGET_LATE_MAX = 0.01  # the budget controller: at most this fraction of cycles late
FIXED_LATE_MIN = 0.05  # fixed full depth: at least this (else the deadline was no threat)
SORTING_POINTS = 2.0  # the budget controller's sorting: within this of unpressured, points
CERTAIN_MS = 1.0  # margin for "certainly late" (the last publish to the controller's recv)


def audit(policy_records, controller_records, deadline_ms: float, holds_ns=()) -> dict:
    """A run's misses from its traces (one host, one clock). late_cycles: cycles the controller
    reported late; certainly_late: cycles the policy's own stamps put past the deadline (its
    last publish - capture > deadline + CERTAIN_MS; the trace's "last_publish" stamp where it
    has one, else "end", stamped after it: a preemption in between can make an on-time cycle
    look late, never the reverse) while the controller ran (captured no earlier than the first
    capture it traced, and that last waypoint sent no later than the latest stamp it traced:
    a waypoint still in flight when the run ended could not be reported); of those, held:
    their last waypoint left during an ordered hold (holds_ns: (start, end) pairs; the
    controller rejects late waypoints then and, by design, reports none), undetected: the
    others never reported late; stale_applied: cycles whose first setpoint was applied more
    than a deadline after capture, and by how much at most (stale_applied_max_ms; the
    controller checks a chunk's age when it arrives and again when it commits the first
    setpoint, so this should be 0). late_after_warmup: the controller-traced cycles captured
    WARMUP_S or more after its first that were reported late, over those cycles (the
    calibration takes no samples in that start-up either)."""
    deadline_ns = to_ns(deadline_ms)
    controller_records = list(controller_records)  # read twice (a trace file is an iterator)
    late, applied, stale, over_ns, captures = set(), 0, 0, 0, []
    for rec in controller_records:
        st, cycle = rec.get("stamps"), rec.get("cycle")
        if (
            not isinstance(st, dict)
            or not isinstance(cycle, int)
            or not isinstance(st.get("capture"), int)
        ):
            continue
        captures.append(st["capture"])
        if "late_index" in (rec.get("fields") or {}):
            late.add(cycle)
        elif isinstance(st.get("apply"), int):
            applied += 1
            over = st["apply"] - st["capture"] - deadline_ns
            stale += over > 0
            over_ns = max(over_ns, over)
    first = min(captures) if captures else 0
    last = max(
        (
            v
            for rec in controller_records
            if isinstance(rec.get("stamps"), dict)
            for v in rec["stamps"].values()
            if isinstance(v, int)
        ),
        default=-1,
    )
    steady = {
        rec["cycle"]
        for rec in controller_records
        if isinstance(rec.get("stamps"), dict)
        and isinstance(rec.get("cycle"), int)
        and isinstance(rec["stamps"].get("capture"), int)
        and rec["stamps"]["capture"] >= first + WARMUP_S * 1e9
    }
    certain, held = set(), set()
    for rec in policy_records:
        st, cycle = rec.get("stamps"), rec.get("cycle")
        if not isinstance(st, dict):
            continue
        sent = st.get("last_publish", st.get("end"))
        if (
            isinstance(sent, int)
            and isinstance(st.get("capture"), int)
            and first <= st["capture"]
            and sent <= last
            and sent - st["capture"] > deadline_ns + CERTAIN_MS * 1e6
        ):
            certain.add(cycle)
            if any(a <= sent <= b for a, b in holds_ns):
                held.add(cycle)
    return {
        "late_cycles": len(late),
        "certainly_late": len(certain),
        "held": len(held - late),
        "undetected": len(certain - late - held),
        "applied_cycles": applied,
        "stale_applied": stale,
        "stale_applied_max_ms": round(over_ns / 1e6, 3),
        "late_after_warmup": round(len(steady & late) / len(steady), 4) if steady else None,
    }


def hold_intervals(monitor_report: dict) -> list[tuple[int, float]]:
    """(safe_hold, clear) times (ns) from a monitor report's events; a hold never cleared
    lasts to the end."""
    out, start = [], None
    for ev in monitor_report.get("events", []):
        if ev.get("kind") == "safe_hold" and start is None:
            start = ev["t_ns"]
        elif ev.get("kind") == "clear" and start is not None:
            out.append((start, ev["t_ns"]))
            start = None
    return out + ([(start, float("inf"))] if start is not None else [])


COUNTED = ("cycles", "deadline_misses", "late_waypoints", "budget_changes", "budget_requests")
AUDIT_COUNTED = (
    "late_cycles",
    "certainly_late",
    "held",
    "undetected",
    "applied_cycles",
    "stale_applied",
)


def pool(runs: list[dict]) -> dict:
    """One role's runs as one: counts summed (cycles, misses, objects, the audit's, holds),
    success_rate and late_after_warmup over the pooled counts (the latter weighted by cycles),
    e2e and stale maxima the largest; each run itself under "runs". A run that did not end
    cleanly makes exit_code nonzero."""
    runs = [r for r in runs if r]
    if not runs:
        return {}
    out: dict = {
        "runs": runs,
        "exit_code": max(r.get("exit_code", 1) for r in runs),
        "deadline_ms": runs[0].get("deadline_ms"),
    }
    for k in COUNTED:
        vals = [r.get(k) for r in runs]
        out[k] = None if None in vals else sum(vals)
    out["objects"] = {
        k: sum(r.get("objects", {}).get(k, 0) for r in runs)
        for k in ("spawned", "correct", "wrong", "missed", "dropped")
    }
    resolved = sum(out["objects"][k] for k in ("correct", "wrong", "missed", "dropped"))
    out["success_rate"] = out["objects"]["correct"] / resolved if resolved else None
    out["late_fraction"] = late_fraction(out)
    out["holds"] = {
        k: sum((r.get("holds") or {}).get(k) or 0 for r in runs) for k in ("watchdog", "ordered")
    }
    maxima = [r["e2e_ms"]["max"] for r in runs if (r.get("e2e_ms") or {}).get("max") is not None]
    out["e2e_ms"] = {"p50": None, "p99": None, "max": max(maxima) if maxima else None}
    audits = [r["audit"] for r in runs if r.get("audit")]
    if audits:
        a = {k: sum(x[k] for x in audits) for k in AUDIT_COUNTED}
        a["stale_applied_max_ms"] = max(x["stale_applied_max_ms"] for x in audits)
        steady = [
            (x["late_after_warmup"], r.get("cycles") or 0)
            for x, r in zip(audits, runs)
            if x.get("late_after_warmup") is not None
        ]
        w = sum(c for _, c in steady)
        a["late_after_warmup"] = round(sum(f * c for f, c in steady) / w, 4) if w else None
        out["audit"] = a
    return out


def _points(run: dict) -> float | None:
    rate = run.get("success_rate")
    return None if rate is None else 100 * rate


def verdict(results: dict) -> dict:
    """The targets, one check each: {"met": all met, "checks": [{"check", "value", "target",
    "met"}]}; a check whose figure is missing counts as not met."""
    checks = []

    def check(name, value, target, ok):
        checks.append(
            {
                "check": name,
                "value": value,
                "target": target,
                "met": value is not None and bool(ok(value)),
            }
        )

    base = _points(results.get("unpressured", {}))
    for cond, _ in CONDITIONS:
        pair = results.get(cond, {})
        fixed, budget = pair.get("fixed", {}), pair.get("budget", {})
        check(
            f"{cond}: fixed full depth late",
            late_fraction(fixed),
            f">= {FIXED_LATE_MIN:g}",
            lambda v: v >= FIXED_LATE_MIN,
        )
        check(
            f"{cond}: budget controller late",
            late_fraction(budget),
            f"<= {BUDGET_LATE_MAX:g}",
            lambda v: v <= BUDGET_LATE_MAX,
        )
        for role, run in (("fixed", fixed), ("budget", budget)):
            a = run.get("audit", {})
            check(
                f"{cond} {role}: certainly late cycles not reported",
                a.get("undetected"),
                "0",
                lambda v: v == 0,
            )
            check(
                f"{cond} {role}: cycles applied past the deadline",
                a.get("stale_applied"),
                "0",
                lambda v: v == 0,
            )
        pts = _points(budget)
        check(
            f"{cond}: budget controller sorting - unpressured (points)",
            None if pts is None or base is None else round(pts - base, 1),
            f">= -{SORTING_POINTS:g}",
            lambda v: v >= -SORTING_POINTS,
        )
    return {"met": all(c["met"] for c in checks), "checks": checks}


def verdict_lines(v: dict) -> list[str]:
    """One line per check, then the overall line."""
    out = [
        f"{'met    ' if c['met'] else 'NOT MET'} {c['check']}: {c['value']} (target {c['target']})"
        for c in v["checks"]
    ]
    return out + [f"targets {'all met' if v['met'] else 'NOT all met'}"]


def pressure_columns(results: dict) -> list[tuple[str, str, dict, dict | None]]:
    """(heading, role, run, calibration) per run of CONDITIONS, for
    rtinfer.cli.stress.runs_table."""
    out = []
    for cond, _ in CONDITIONS:
        pair = results.get(cond, {})
        for role, _ in ROLES:
            label = "fixed full depth" if role == "fixed" else "budget controller"
            out.append((f"{cond}: {label}", role, pair.get(role, {}), pair.get("calibration")))
    return out
