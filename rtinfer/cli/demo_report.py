"""`rtinfer demo`'s report: the run directory's reports (the sim's, per cell in a fleet; the
monitor's; the camera's; the launcher's summary) and the nodes' last health merged into one
dict, with the failure lines of a run that failed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from rtinfer.realtime.deadline import DEADLINE_MS


def scheduling(run_dir: Path) -> dict[str, str]:
    """Per node, what the OS granted of its launch file's cpus and priority: its log's
    first `launch_child NAME: ...` line (rtinfer.launch.child), e.g. "affinity skipped: no
    cpus given, scheduler ok". A node given neither (or realtime: false) is not in it."""
    out = {}
    for log in sorted(run_dir.glob("*.log")):
        try:
            with open(log, errors="replace") as f:
                for line in itertools.islice(f, 20):
                    if line.startswith(f"launch_child {log.stem}: "):
                        out[log.stem] = line.split(": ", 1)[1].strip()
                        break
        except OSError:
            continue
    return out


def robot_reports(run_dir: Path, robots: int = 0) -> list[dict]:
    """The fleet launch's per-cell reports (sim_report-K.json), in robot order: one per robot
    of the `robots` launched ({} for a cell that left none: it ended early), and as many
    more as are there."""
    out, k = [], 0
    while k < robots or (run_dir / f"sim_report-{k}.json").exists():
        out.append(read_json(run_dir / f"sim_report-{k}.json"))
        k += 1
    return out


def _robot_entry(k: int, sim: dict, mon: dict, ended: dict) -> dict:
    """Cell k's entry: its sim report's figures, and the monitor's for its controller
    (controller-k: cycles and deadline misses; None where it has none); "ended": why the
    launcher ended this robot before the run did (launch_summary.json), else None."""
    m, c = sim.get("metrics", {}), sim.get("controller", {})
    resolved = m.get("resolved", 0)
    own = mon.get("robots", {}).get(f"controller-{k}", {})
    return {
        "robot": f"cell-{k}",
        "task": sim.get("task"),
        "cycles": own.get("cycles"),
        "deadline_misses": own.get("misses"),
        "objects": {x: m.get(x, 0) for x in ("spawned", "correct", "wrong", "missed", "dropped")},
        "success_rate": m["correct"] / resolved if resolved else None,
        "e2e_ms": {x: sim.get("e2e_ms", {}).get(x) for x in ("p50", "p99", "max")},
        "chunks_accepted": c.get("chunks_accepted"),
        "late_waypoints": c.get("late_waypoints"),
        "late_ticks": c.get("late_ticks"),
        "ended": ended.get(str(k)),
    }


def _merged_fleet(sims: list[dict]) -> dict:
    """One sim report standing for all cells: metrics, controller, stack and bus counters
    summed."""
    merged: dict = {k: {} for k in ("metrics", "controller", "stack", "bus")}
    for s in sims:
        for section, dst in merged.items():
            for k, v in s.get(section, {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    dst[k] = dst.get(k, 0) + v
    return {**merged, "sim_s": sims[0].get("sim_s")}


def collect_report(run_dir: Path, latest: dict, exit_code: int, robots: int = 0) -> dict:
    """Merge the sim's and the monitor's reports (and the policy's last health) into one;
    a failed launch adds "error": the launcher's failure lines and the failed nodes' last
    log lines; a report that is missing or unreadable is named in "reports_missing" (cycles
    and misses then come from the monitor's last health). A fleet run (sim_report-K.json
    per cell) adds "robots", one entry per cell
    (with the monitor's cycles and misses of its controller), and sums the cells' objects
    and controller counters."""
    fleet = robot_reports(run_dir, robots)
    sim = (
        _merged_fleet([s for s in fleet if s] or [{}])
        if fleet
        else read_json(run_dir / "sim_report.json")
    )
    mon = read_json(run_dir / "monitor_report.json")
    # A report a full disk kept out: the monitor's last health carries the same counts
    sims = (
        [(f"sim_report-{k}.json", r) for k, r in enumerate(fleet)]
        if fleet
        else [("sim_report.json", sim)]
    )
    missing = [n for n, r in [("monitor_report.json", mon), *sims] if not r]
    said = latest.get("monitor", {}).get("counters", {})
    m, stages = sim.get("metrics", {}), mon.get("stages_ms", {})
    e2e, ttft = stages.get("e2e") or sim.get("e2e_ms", {}), stages.get("ttft", {})
    resolved = m.get("resolved", 0)
    pol = latest.get("policy", {}).get("counters", {})
    out = {
        "exit_code": exit_code,
        "run_dir": str(run_dir),
        "cycles": mon.get(
            "cycles", said.get("cycles", sim.get("controller", {}).get("chunks_accepted"))
        ),
        "deadline_ms": mon.get("deadline_ms", DEADLINE_MS),
        "deadline_misses": mon.get("misses", said.get("misses")),
        "late_waypoints": sim.get("controller", {}).get("late_waypoints"),
        "e2e_ms": {k: e2e.get(k) for k in ("p50", "p99", "max")},
        "ttft_ms": {k: ttft.get(k) for k in ("p50", "p99")},
        "objects": {k: m.get(k, 0) for k in ("spawned", "correct", "wrong", "missed", "dropped")},
        "success_rate": m["correct"] / resolved if resolved else None,
        "budget_changes": mon.get("budget", {}).get("changes"),
        "budget_requests": mon.get("budget", {}).get("requests"),
        "holds": {"watchdog": sim.get("controller", {}).get("holds"), "ordered": mon.get("holds")},
        "controller": sim.get("controller", {}),
        "policy": pol,
        # the limits the robot enforced (clamps) and what its sockets dropped: never silent
        "stack": sim.get("stack", {}),
        "bus": sim.get("bus", {}),
        "sim_s": sim.get("sim_s"),
        "task": sim.get("task"),
        "scheduling": scheduling(run_dir),
    }
    camera = read_json(run_dir / "camera_report.json")
    if camera or "camera" in sim:
        out["camera"] = camera_figures(camera, sim.get("camera", {}))
    if fleet:
        ended = read_json(run_dir / "launch_summary.json").get("robots_ended", {})
        out["robots"] = [_robot_entry(k, s, mon, ended) for k, s in enumerate(fleet)]
    if missing:  # not written (a full disk) or unreadable: their figures are not in here
        out["reports_missing"] = missing
    if exit_code != 0:
        out["error"] = failure_lines(run_dir)
    return out


def failure_lines(run_dir: Path) -> list[str]:
    """What went wrong, from the run directory: the launcher's "node 'X' FAILED: ...; log
    PATH" lines; failing those (an older launcher), its "failed for good" lines and a
    launch-file error, then the last line of each failed node's log."""
    console = _lines(run_dir / "console.log")
    failed = [ln for ln in console if ln.startswith("[launch]") and " FAILED" in ln]
    if failed:  # the launcher's one line per failed node: the node, the reason, its log
        return failed
    out = [
        ln
        for ln in console
        if (ln.startswith("[launch]") and "for good" in ln)
        or (not ln.startswith("[") and "error" in ln.lower() or ln.startswith("launch:"))
    ]
    summary = read_json(run_dir / "launch_summary.json").get("nodes", {})
    for name, node in summary.items():
        if node.get("state") == "failed" or (node.get("last_exit") or 0) > 0:
            last = _lines(run_dir / f"{name}.log")[-1:]
            out += [f"[{name}] {ln}  (log: {run_dir / f'{name}.log'})" for ln in last]
    return list(dict.fromkeys(out)) or [
        f"the launcher exited without a reason; see {run_dir / 'console.log'}"
    ]


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def camera_figures(camera: dict, sim: dict) -> dict:
    """The camera's part of the report: what the camera process rendered (camera_report.json)
    and what the sim did with its frames (its report's "camera": sent with an observation,
    observations skipped for want of a frame or for a frame older than the deadline, the
    frames' age when sent)."""
    return {
        "camera": sim.get("camera", camera.get("camera")),
        "hz": camera.get("hz"),
        "shape": sim.get("shape", camera.get("shape")),
        "rendered": camera.get("frames"),
        "render_ms": camera.get("render_ms"),
        "dropped": camera.get("dropped"),
        "frames_sent": sim.get("sent"),
        "skipped_no_frame": sim.get("no_frame"),
        "skipped_stale": sim.get("stale"),
        "frames_bad": sim.get("bad"),
        "frame_age_ms": sim.get("frame_age_ms"),
    }
