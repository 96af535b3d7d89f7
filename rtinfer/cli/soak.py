"""`rtinfer soak --minutes M --json`: the demo launch under mild stress for M minutes.

Runs launch/conveyor_sorting.yaml (the learned policy) if models/zoo/conveyor-v1 exists,
else launch/conveyor_expert.yaml, through the real launcher, with one low-priority busy
process as background load. The sim node runs as SOAK_SIM (examples.conveyor_sorting.soak_sim,
named by module string): the stock SimNode with every written force checked against the
force limit. Reported:

- RSS of every node (VmRSS from /proc/PID/status, sampled each second): mean over the
  first minute vs the last minute (first vs last third for runs under 3 minutes);
- deadline misses and cycles (the monitor), holds, rejected chunks and dropped messages
  (the controller and the policy), forces written beyond the limit (must be 0; the stack's
  clamps are fine and reported), objects sorted.

Targets for a 30-minute soak: RSS growth < 5 % per node, zero misses at nominal load,
zero forces beyond the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rtinfer.cli.shipped import launch_file
from rtinfer.model.zoo import zoo_model

# The sim's hardware, with every written force checked against the limit (a module string:
# the runtime never imports the example).
SIM_HARDWARE = "examples.conveyor_sorting.sim_node:ConveyorSim"
SOAK_HARDWARE = "examples.conveyor_sorting.soak_sim:CheckedConveyorSim"
RSS_GROWTH_TARGET_PCT = 5.0


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return None


def _pids(launch_log: Path) -> dict[str, int]:
    """The current pid of each node, from the launcher's 'started NAME pid N' lines."""
    text = launch_log.read_text() if launch_log.exists() else ""
    return {n: int(p) for n, p in re.findall(r"started '([^']+)' pid (\d+)", text)}


def _launch_file(run_dir: Path, seconds: float, policy: str | None) -> Path:
    model = zoo_model() if policy is None else Path(policy).resolve()
    expert = policy == "expert" or (policy is None and not model.is_dir())
    src = launch_file("conveyor_expert.yaml" if expert else "conveyor_sorting.yaml")
    data = yaml.safe_load(src.read_text())
    data["seconds"], data["name"] = seconds, f"soak-{data.get('name', src.stem)}"
    if not expert:
        data.setdefault("vars", {})["model"] = str(model)
    for node in data["nodes"]:
        if node["name"] == "sim":
            node["args"] = [SOAK_HARDWARE if a == SIM_HARDWARE else a for a in node["args"]]
    out = run_dir / "soak.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _window(samples: list[tuple[float, int]], t_end: float, first: bool) -> float | None:
    if not samples:
        return None
    t0 = samples[0][0]
    span = min(60.0, (t_end - t0) / 3)
    xs = [kb for t, kb in samples if (t <= t0 + span if first else t >= t_end - span)]
    return sum(xs) / len(xs) if xs else None


def run(
    minutes: float, *, policy: str | None = None, run_dir: str | None = None, stress: int = 1
) -> dict:
    """Blocks for about `minutes` (+ startup); returns the figures (see module docstring)."""
    rd = Path(run_dir or tempfile.mkdtemp(prefix="rtinfer-soak-")).resolve()
    rd.mkdir(parents=True, exist_ok=True)
    seconds = minutes * 60.0
    launch = _launch_file(rd, seconds, policy)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.launch.supervisor",
            str(launch),
            "--run-dir",
            str(rd),
            "--seconds",
            str(seconds + 120),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    code = f"import time\nend=time.monotonic()+{seconds + 60}\nwhile time.monotonic()<end: pass"
    hogs = [
        subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: os.nice(10))
        for _ in range(stress)
    ]
    samples: dict[str, list[tuple[float, int]]] = {}
    try:
        while proc.poll() is None:
            now = time.monotonic()
            for name, pid in _pids(rd / "launch.log").items():
                kb = rss_kb(pid)
                if kb is not None:
                    samples.setdefault(name, []).append((now, kb))
            time.sleep(1.0)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        if proc.poll() is None:
            proc.terminate()
        proc.wait(60)
    return _figures(rd, proc.returncode, samples, minutes, launch)


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _figures(rd: Path, exit_code: int, samples: dict, minutes: float, launch: Path) -> dict:
    sim, mon = _read(rd / "sim_report.json"), _read(rd / "monitor_report.json")
    nodes = {}
    for name, s in samples.items():
        t_end = s[-1][0]
        first, last = _window(s, t_end, True), _window(s, t_end, False)
        nodes[name] = {
            "rss_first_kb": first,
            "rss_last_kb": last,
            "samples": len(s),
            "growth_pct": 100.0 * (last - first) / first if first and last else None,
        }
    growth = [n["growth_pct"] for n in nodes.values() if n["growth_pct"] is not None]
    ctl = sim.get("controller", {})
    force = sim.get("force_check", {})
    out = {
        "minutes": minutes,
        "launch": str(launch),
        "run_dir": str(rd),
        "exit_code": exit_code,
        "nodes": nodes,
        "rss_growth_max_pct": max(growth) if growth else None,
        "cycles": mon.get("cycles"),
        "deadline_misses": mon.get("misses"),
        "holds": {"watchdog": ctl.get("holds"), "ordered": mon.get("holds")},
        "rejected": {k: v for k, v in ctl.items() if k.startswith("rejected_")},
        "dropped": {"obs_not_sent": ctl.get("obs_dropped"), "late_ticks": ctl.get("late_ticks")},
        "force_over_limit": force.get("over_limit"),
        "max_force_ratio": force.get("max_ratio"),
        "clamps": sim.get("stack"),
        "metrics": sim.get("metrics"),
        "e2e_ms": sim.get("e2e_ms"),
        "instruction": sim.get("instruction"),
    }
    out["targets_met"] = bool(
        exit_code == 0
        and out["force_over_limit"] == 0
        and out["deadline_misses"] == 0
        and growth
        and max(growth) < RSS_GROWTH_TARGET_PCT
    )
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The soak's options, for `rtinfer soak` and `python -m rtinfer.cli.soak`."""
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    ap.add_argument(
        "--policy",
        default=None,
        help='"expert" or a model directory (default: '
        "the shipped models/zoo/conveyor-v1 if present, else the expert)",
    )
    ap.add_argument("--run-dir", default=None, help="logs and reports (default: a temp dir)")
    ap.add_argument("--stress", type=int, default=1, help="low-priority busy processes (default 1)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")


def run_args(a: argparse.Namespace) -> int:
    r = run(a.minutes, policy=a.policy, run_dir=a.run_dir, stress=a.stress)
    print(json.dumps(r, indent=None if a.json else 1))
    return 0 if r["targets_met"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rtinfer soak", description=__doc__.split("\n")[0])
    add_arguments(ap)
    return run_args(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
