"""The stress demo's threat, calibrated in place at start-up: a background load on the policy
node's own CPU, and a deadline that the fixed full-depth policy misses under that load, on
this machine, now, while the budget controller's cheapest level meets it.

A fixed 20 ms deadline said nothing on a faster or less loaded host (0 misses either way),
and timing the policy's chunk offline underestimated the launched stack. So
`rtinfer demo --stress cpu`:

- gives the policy node's main thread (its compute) one CPU (policy_cpu: the last one) and
  keeps its ZeroMQ I/O thread, the launcher, sim and monitor off it (pin_tasks: with the I/O
  thread there, waypoint 0's transport waited for the rest of the chunk's compute); HOGS
  busy processes run pinned to that CPU under SCHED_IDLE. At the policy's own priority a
  hog made every wake-up wait behind it for a scheduler slice (waypoint 0's e2e p50 9.3 ms
  at full depth, 8.9 ms at the cheapest level): scheduling delay that no budget level
  removes. Under SCHED_IDLE (any waking task preempts it) it takes the policy's CPU whenever
  the policy waits and still slows its compute (the full chunk 6.5 -> ~14.5 ms p50 here),
  which a cheaper level does cut; at nice 19 instead the tails were longer (in 1 of 2 quiet
  runs the fixed run was only 1.0% late);
- calibrates from short runs of the launched stack itself under that load (calibration_seconds
  of sim each, the first WARMUP_S no samples, at a loose deadline so no waypoint is rejected):
  one at fixed full depth and one pinned at the cheapest budget level (the node's --level).
  A sample is a cycle's chunk time
  (chunk_complete_ms): its last waypoint's arrival - capture, since the controller rejects a
  chunk's waypoints past the deadline one by one and a cycle is on time only when its last
  waypoint is (waypoint 0's apply alone predicted ~10% late where runs were 85-100% late);
- sets the deadline at the fixed run's chunk-time p70 (AIM_Q: about 30% of its cycles late
  in calibration; at least 5% wanted, and a run at that deadline is less late than its
  calibration, since rejected waypoints hold the arm and a still scene decodes faster: at
  p85, 2 of 3 60 s runs were 1.6-3.3% late), raised to the cheapest level's p99 x
  FLOOR_HEADROOM when that is higher, so that the budget controller has a level that fits.
  When that floor is above the fixed run's p95, no deadline separates the two here now: the
  deadline is the fixed p70 and the threat says so (`separable` false).

`choose_deadline` and `chunk_complete_ms` are pure; `pin_tasks` and the demo read the clock.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np

# rtinfer demo --stress (near-deadline: rtinfer.cli.pressure)
STRESS_MODES = ("cpu", "near-deadline")
AIM_Q = 0.70  # the deadline: this quantile of the fixed run's chunk time (~30% late)
CEIL_Q = 0.95  # a floor above this one leaves nothing to separate
FLOOR_Q, FLOOR_HEADROOM = 0.99, 1.10  # at or above the cheapest level's p99 x 1.10
HOGS = 1  # busy processes on the policy's CPU ...
# ... under SCHED_IDLE: they run whenever the policy waits and never delay its wake-up
WARMUP_S = 2.0  # a calibration run's first seconds (graphs, caches, the other nodes
#                        starting) are no samples: their chunk-time p90 was 25 ms against 16
CALIBRATE_S = 10.0  # sim seconds of each calibration run (at most; see calibration_seconds)
WARMUP_CYCLES = int(WARMUP_S * 20)  # at the demo's 20 Hz policy rate
CALIBRATE_DEADLINE_MS = 200.0  # loose: no waypoint rejected, every cycle a sample
QUANTILES = (0.5, 0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Threat:
    deadline_ms: float
    separable: bool  # the cheapest level's bound sits below the fixed run's
    fixed_late: float  # calibration: fraction of the fixed run's cycles past the deadline
    cheapest_late: float  # ... and of the cheapest-level run's
    full_ms: dict  # chunk-time quantiles (p50, p80, ...) of the fixed run, ms
    cheapest_ms: dict
    samples: int  # cycles, the fewer of the two runs
    how: str  # one line: how the deadline was chosen
    load: str = ""  # the background load

    def report(self) -> dict:
        return asdict(self)


def policy_cpu() -> int:
    """The CPU the policy node and the hogs share: the last one this process may use."""
    return max(os.sched_getaffinity(0))


def load_line(hogs: int = HOGS, cpu: int | None = None) -> str:
    cpu = policy_cpu() if cpu is None else cpu
    if hogs == 0:
        return f"the policy node alone on CPU {cpu}, no added load"
    return f"the policy node alone with {hogs} busy process(es) under SCHED_IDLE on CPU {cpu}"


def calibration_seconds(seconds: float) -> float:
    """Sim seconds of each calibration run for a demo of `seconds` per run: WARMUP_S, then a
    quarter of it, 4 s to CALIBRATE_S - WARMUP_S."""
    return float(WARMUP_S + min(CALIBRATE_S - WARMUP_S, max(4.0, seconds / 4)))


def _quantiles(x: np.ndarray) -> dict:
    return {f"p{round(q * 100)}": round(float(np.quantile(x, q)), 2) for q in QUANTILES}


def chunk_complete_ms(policy_records, controller_records) -> list[float]:
    """Each cycle's chunk time (ms): when its last waypoint reached the controller - capture.
    From the policy node's trace ("end": its last waypoint published; one host, one clock)
    plus that cycle's transport (recv - publish of waypoint 0, from the controller's trace);
    a cycle missing from either trace is no sample."""
    transport: dict[int, int] = {}
    for rec in controller_records:
        st = rec.get("stamps")
        if (
            isinstance(st, dict)
            and isinstance(st.get("recv"), int)
            and isinstance(st.get("publish"), int)
            and isinstance(rec.get("cycle"), int)
        ):
            transport.setdefault(rec["cycle"], st["recv"] - st["publish"])
    out = []
    for rec in policy_records:
        st, cycle = rec.get("stamps"), rec.get("cycle")
        if (
            isinstance(st, dict)
            and isinstance(st.get("end"), int)
            and isinstance(st.get("capture"), int)
            and cycle in transport
        ):
            out.append((st["end"] - st["capture"] + transport[cycle]) / 1e6)
    return out


def choose_deadline(fixed_ms, cheapest_ms, given_ms: float | None = None) -> Threat:
    """The deadline (ms) from the chunk time (ms) of each cycle of two calibration runs, at
    fixed full depth and at the cheapest budget level: the fixed run's p70, raised to the cheapest
    level's p99 x 1.10 when higher; `separable` false when that floor is above the fixed
    run's p95 (given_ms: the user's --deadline-ms instead, with the late fractions it
    implies). Raises ValueError on empty or non-finite samples."""
    full, low = np.asarray(fixed_ms, float), np.asarray(cheapest_ms, float)
    if full.size == 0 or low.size == 0 or not (np.isfinite(full).all() and np.isfinite(low).all()):
        raise ValueError("calibration needs finite chunk-time samples from both calibration runs")
    aim, aq = float(np.quantile(full, AIM_Q)), f"p{round(AIM_Q * 100)}"
    ceil = float(np.quantile(full, CEIL_Q))
    floor = float(np.quantile(low, FLOOR_Q)) * FLOOR_HEADROOM
    separable = floor <= ceil
    if given_ms is not None:
        deadline, how = float(given_ms), "given by --deadline-ms (not calibrated)"
    elif not separable:
        deadline = round(aim, 1)
        how = (
            f"the fixed run's chunk-time {aq}; no deadline separates the levels now "
            f"(the cheapest level's p99 x {FLOOR_HEADROOM:g} is {floor:.1f} ms, above the "
            f"fixed p95 {ceil:.1f} ms): expect the budget controller to miss too"
        )
    elif floor > aim:
        deadline = round(floor, 1)
        how = (
            f"the cheapest level's chunk-time p99 x {FLOOR_HEADROOM:g} (above the fixed run's "
            f"{aq}, {aim:.1f} ms), measured in the launched stack under that load"
        )
    else:
        deadline = round(aim, 1)
        how = f"the fixed run's chunk-time {aq}, measured in the launched stack under that load"
    late = lambda x: round(float(np.mean(x > deadline)), 4)  # noqa: E731
    return Threat(
        deadline,
        separable,
        late(full),
        late(low),
        _quantiles(full),
        _quantiles(low),
        int(min(full.size, low.size)),
        how,
    )


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (from /proc; [] where there is none)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def pin_tasks(root_pid: int, marker: str, cpu: int) -> int:
    """Pin the main thread of each process below root_pid whose command line holds `marker`
    to `cpu`, and its other threads (ZeroMQ's I/O thread: the sends) to every other CPU
    this process may use, so a waypoint's transport never waits behind the compute or the
    load; returns how many processes matched (0: not started yet)."""
    rest = (os.sched_getaffinity(0) - {cpu}) or {cpu}
    n = 0
    for pid in descendants(root_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            n += 1
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), {cpu} if int(tid) == pid else rest)
        except OSError:  # it ended meanwhile
            continue
    return n


def late_fraction(run: dict) -> float | None:
    """A run's cycles delivered late (the monitor's deadline misses) over its cycles."""
    misses, cycles = run.get("deadline_misses"), run.get("cycles")
    return round(misses / cycles, 4) if misses is not None and cycles else None


def percent_text(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def sorted_text(run: dict) -> str:
    o, rate = run.get("objects", {}), run.get("success_rate")
    resolved = sum(o.get(k, 0) for k in ("correct", "wrong", "missed", "dropped"))
    return f"{o.get('correct', 0)}/{resolved}" + ("" if rate is None else f" ({100 * rate:.1f}%)")


def stress_table(results: dict):
    """The two `--stress cpu` runs side by side (a rich Table), with the calibrated threat."""
    threat = results.get("calibration")
    title = "fixed full depth vs the budget controller"
    if threat:
        title += f": deadline {threat['deadline_ms']:g} ms ({threat['how']})"
        if threat.get("load"):
            title += f"; load: {threat['load']}"
    return runs_table(
        title,
        [
            ("fixed full depth", "fixed", results.get("stress-fixed", {}), threat),
            ("budget controller", "budget", results.get("stress-budget", {}), threat),
        ],
    )


def scheduling_table(results: dict):
    """The scheduling's part of `--stress cpu` (a rich Table): the budget controller with a
    CPU-bound neighbour at normal priority on every CPU, without and with the launch file's
    SCHED_FIFO priorities (what each node was granted in the last row)."""
    threat = results.get("calibration")
    title = "the scheduling's part: a busy process on every CPU, the budget controller on"
    if threat:
        title += f", deadline {threat['deadline_ms']:g} ms"
    t = runs_table(
        title,
        [
            ("normal scheduling", "budget", results.get("busy-unscheduled", {}), None),
            ("launch file's SCHED_FIFO", "budget", results.get("busy-scheduled", {}), None),
        ],
    )
    t.add_row(
        "scheduling granted",
        *[
            ", ".join(
                f"{k}: {v.rsplit('scheduler ', 1)[-1]}"
                for k, v in sorted((results.get(name) or {}).get("scheduling", {}).items())
            )
            or "none"
            for name in ("busy-unscheduled", "busy-scheduled")
        ],
    )
    return t


def audit_text(run: dict) -> str:
    """rtinfer.cli.pressure.audit's figures: undetected of certainly late (and those during
    an ordered hold) / cycles applied past the deadline."""
    a = run.get("audit")
    if not a:
        return "-"
    held = f" ({a['held']} held)" if a.get("held") else ""
    over = (
        f" (at most +{a['stale_applied_max_ms']:g} ms)"
        if a.get("stale_applied") and a.get("stale_applied_max_ms") is not None
        else ""
    )
    return f"{a['undetected']} of {a['certainly_late']}{held} / {a['stale_applied']}{over}"


def runs_table(title: str, columns, deadline_row: bool = False):
    """Runs side by side (a rich Table). columns: (heading, role "fixed" or "budget", run
    report, its calibration Threat.report() or None); a fixed column shows the calibration's
    full-depth figures, a budget column its cheapest level's; deadline_row: each column's
    calibrated deadline in a row (when the title does not give the one deadline)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("", justify="left")
    for heading, *_ in columns:
        t.add_column(heading, justify="right")

    def row(label, f, of_calibration=False):
        cells = []
        for _, role, run, cal in columns:
            x = cal if of_calibration else run
            cells.append(f(x, role) if x else "-")
        t.add_row(label, *cells)

    if deadline_row:
        row("deadline", lambda c, _: f"{c['deadline_ms']:g} ms", True)
    if any(c for *_, c in columns):
        row(
            "late in calibration",
            lambda c, role: (
                percent_text(c["fixed_late"])
                if role == "fixed"
                else percent_text(c["cheapest_late"]) + " (cheapest level)"
            ),
            True,
        )
        row(
            "chunk time p50 / p99 (calibration)",
            lambda c, role: "{p50:.1f} / {p99:.1f} ms".format(
                **c["full_ms" if role == "fixed" else "cheapest_ms"]
            ),
            True,
        )
    row(
        "cycles late",
        lambda r, _: (
            f"{r.get('deadline_misses')} / {r.get('cycles')} ({percent_text(late_fraction(r))})"
        ),
    )
    row("late waypoints (rejected)", lambda r, _: str(r.get("late_waypoints")))
    if any(run.get("audit") for _, _, run, _ in columns):
        row(
            f"late after the first {WARMUP_S:g} s",
            lambda r, _: percent_text((r.get("audit") or {}).get("late_after_warmup")),
        )
        row("unreported late / applied late", lambda r, _: audit_text(r))
    row(
        "e2e p50 / p99 / max",
        lambda r, _: (
            " / ".join(
                "-" if r["e2e_ms"].get(k) is None else f"{r['e2e_ms'][k]:.1f}"
                for k in ("p50", "p99", "max")
            )
            + " ms"
        ),
    )
    row("sorted", lambda r, _: sorted_text(r))
    row("budget changes", lambda r, _: str(r.get("budget_changes")))
    row("watchdog holds", lambda r, _: str(r.get("holds", {}).get("watchdog")))
    return t
