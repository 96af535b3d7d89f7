"""`rtinfer demo`: the conveyor-sorting demo as separate supervised processes, with a live
dashboard and a final report.

Runs a launch file (default launch/conveyor_sorting.yaml: MuJoCo cell + PID layer, the
learned policy on ONNX Runtime, the deadline monitor) through `rtinfer launch` in a child
process, watches every node's `health` for the dashboard, then merges the nodes' reports.
`--stress cpu` runs twice under competing CPU load, a fixed full-depth policy and then the
budget controller, and reports both. It uses a 20 ms deadline unless told otherwise: on a
2-core CPU the shipped policy's e2e stays near 10-20 ms under that load, so the 100 ms
deadline is never at risk and there would be nothing for the budget controller to do.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.live import Live

from rtinfer.monitor.dashboard import Dashboard
from rtinfer.launch.file import load

EXPERT_LAUNCH, MODEL_LAUNCH = "launch/conveyor_expert.yaml", "launch/conveyor_sorting.yaml"
STRESS_DEADLINE_MS = 20.0


def _stress(n: int, seconds: float) -> list[subprocess.Popen]:
    """n busy-looping processes that end by themselves after `seconds`."""
    code = f"import time\nend=time.monotonic()+{seconds}\nwhile time.monotonic()<end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def run_once(launch: str, seconds: float, run_dir: Path, overrides: dict, console: Console,
             title: str, stress: int = 0) -> dict:
    spec = load(launch, overrides)
    endpoints = [e.address(run_dir) for e in spec.endpoints.values()]
    sets = [f"--set={k}={v}" for k, v in {**overrides, "seconds": seconds}.items()]
    cmd = [sys.executable, "-m", "rtinfer.launch.supervisor", launch, "--run-dir", str(run_dir),
           "--seconds", str(seconds + 60), *sets]
    log = open(run_dir / "launch.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    hogs = _stress(stress, seconds + 30) if stress else []
    dash = Dashboard(endpoints, title)
    try:
        with Live(dash.render(), console=console, refresh_per_second=4) as live:
            while proc.poll() is None:
                dash.poll(100)
                live.update(dash.render())
    finally:
        for h in hogs:
            h.kill()
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
        dash.close()
        log.close()
    return collect_report(run_dir, dash.latest, proc.returncode)


def collect_report(run_dir: Path, latest: dict, exit_code: int) -> dict:
    """Merge the sim's and the monitor's reports (and the policy's last health) into one."""
    sim = _read(run_dir / "sim_report.json")
    mon = _read(run_dir / "monitor_report.json")
    m, stages = sim.get("metrics", {}), mon.get("stages_ms", {})
    e2e, ttft = stages.get("e2e") or sim.get("e2e_ms", {}), stages.get("ttft", {})
    resolved = m.get("resolved", 0)
    pol = latest.get("policy", {}).get("counters", {})
    return {
        "exit_code": exit_code, "run_dir": str(run_dir),
        "cycles": mon.get("cycles", sim.get("controller", {}).get("chunks_accepted", 0)),
        "deadline_ms": mon.get("deadline_ms", 100.0), "deadline_misses": mon.get("misses"),
        "late_waypoints": sim.get("controller", {}).get("late_waypoints"),
        "e2e_ms": {k: e2e.get(k) for k in ("p50", "p99", "max")},
        "ttft_ms": {k: ttft.get(k) for k in ("p50", "p99")},
        "objects": {k: m.get(k, 0) for k in ("spawned", "correct", "wrong", "missed", "dropped")},
        "success_rate": m["correct"] / resolved if resolved else None,
        "budget_changes": mon.get("budget", {}).get("changes"),
        "holds": {"watchdog": sim.get("controller", {}).get("holds"), "ordered": mon.get("holds")},
        "controller": sim.get("controller", {}), "policy": pol,
        "sim_s": sim.get("sim_s"),
    }


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def launch_overrides(policy: str | None, deadline_ms: float | None, stress: str | None) -> dict:
    """`--set` overrides for the launch file: the model directory, and the deadline with the
    monitor's budget margins scaled to it (lower the budget below 20% slack, raise it back
    above 50%, as the node's own budget does); --stress defaults to STRESS_DEADLINE_MS."""
    out = {} if policy in (None, "expert") else {"vars.model": policy}
    if stress and deadline_ms is None:
        deadline_ms = STRESS_DEADLINE_MS
    if deadline_ms is not None:
        out.update({"deadline_ms": f"{deadline_ms:g}",
                    "monitor.lower_margin_ms": f"{0.2 * deadline_ms:g}",
                    "monitor.raise_margin_ms": f"{0.5 * deadline_ms:g}"})
    return out


def run(seconds: float = 60.0, *, policy: str | None = None, report: str | None = None,
        png: str | None = None, stress: str | None = None, run_dir: str | None = None,
        deadline_ms: float | None = None) -> int:
    """policy: None (the shipped model), "expert", or a model directory. deadline_ms: the
    end-to-end deadline (None: the launch file's; see launch_overrides)."""
    console = Console()
    launch = EXPERT_LAUNCH if policy == "expert" else MODEL_LAUNCH
    overrides = launch_overrides(policy, deadline_ms, stress)
    if launch == MODEL_LAUNCH and not Path(overrides.get("vars.model", "models/zoo/conveyor-v1")).is_dir():
        console.print("[red]no trained model found[/red]: run with --policy expert, or train one "
                      "(see README) into models/zoo/conveyor-v1")
        return 2
    base = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="rtinfer-demo-"))
    runs = [("nominal", {}, 0)]
    if stress == "cpu":
        n = 2 * (os.cpu_count() or 2)
        runs = [("stress-fixed", {"vars.budget": "--no-budget"}, n), ("stress-budget", {}, n)]
    results = {}
    for name, extra, hogs in runs:
        rd = base / name
        rd.mkdir(parents=True, exist_ok=True)
        results[name] = run_once(launch, seconds, rd, {**overrides, **extra}, console,
                                 f"rtinfer demo: {name}", stress=hogs)
        console.print_json(json.dumps({k: v for k, v in results[name].items()
                                       if k not in ("controller", "policy")}))
        trace = rd / "controller.trace"
        if png and trace.exists():
            from rtinfer.monitor.report import main as report_main
            report_main(str(trace), png=png if len(runs) == 1 else f"{Path(png).stem}-{name}.png")
    out = results["nominal"] if len(runs) == 1 else results
    if report:
        Path(report).write_text(json.dumps(out, indent=1))
        console.print(f"report written to {report}")
    return 0 if all(r["exit_code"] == 0 for r in results.values()) else 1
