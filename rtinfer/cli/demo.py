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
node's last log line, and exits 1.

Stopping: SIGINT (Ctrl-C) or SIGTERM is forwarded once to the launcher, which stops the
nodes in reverse order (each writes its report; the robot holds once the policy is gone);
the demo then prints the partial report and exits 128 + the signal. A second signal is
forwarded too (the launcher then skips the grace period). The launcher and the stress load
get PR_SET_PDEATHSIG, so if the demo dies by any means (SIGKILL too) the launcher stops
its nodes in order, and nothing the demo started outlives it.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from rtinfer.cli.pressure import (
    CONDITIONS,
    ORDER,
    ROLES,
    audit,
    hold_intervals,
    pool,
    pressure_columns,
    verdict,
    verdict_lines,
)
from rtinfer.cli.shipped import launch_file
from rtinfer.cli.stress import (
    CALIBRATE_DEADLINE_MS,
    HOGS,
    STRESS_MODES,
    WARMUP_CYCLES,
    Threat,
    calibration_seconds,
    choose_deadline,
    chunk_complete_ms,
    late_fraction,
    load_line,
    percent_text,
    pin_tasks,
    policy_cpu,
    runs_table,
    scheduling_table,
    sorted_text,
    stress_table,
)
from rtinfer.launch.file import load
from rtinfer.launch.record import check_record
from rtinfer.launch.runs import unwritable
from rtinfer.launch.yaml_lines import LaunchError
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.model.zoo import zoo_model
from rtinfer.monitor.dashboard import Dashboard
from rtinfer.realtime.deadline import DEADLINE_MS
from rtinfer.realtime.report_file import write_report
from rtinfer.realtime.spin import on_signals

EXPERT_LAUNCH, MODEL_LAUNCH = "conveyor_expert.yaml", "conveyor_sorting.yaml"
VISION_LAUNCH = "conveyor_vision.yaml"  # a policy with image inputs: the camera node too
FLEET_LAUNCH = "conveyor_fleet.yaml"  # --robots N: N cells, one inference node
STRESS_DEADLINE_MS = 20.0  # --stress with the expert, which has no chunk time to calibrate
SUPERVISOR = "rtinfer.launch.supervisor:main"
_PR_SET_PDEATHSIG = 1


class DemoError(Exception):
    """An option or output the demo refuses before it starts anything (exit 2)."""


class _Stop:
    """SIGINT/SIGTERM: remember the first, forward each to the launcher (if running)."""

    def __init__(self):
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None

    def __call__(self, signum) -> None:
        self.signum = self.signum or signum
        self.forward(signum)

    def forward(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass


def _stress(n: int, seconds: float, cpu: int | None = None,
            idle: bool = False) -> list[subprocess.Popen]:
    """n busy-looping processes (pinned to `cpu` and under SCHED_IDLE when asked) that end by
    themselves after `seconds`, or when the demo dies (PR_SET_PDEATHSIG SIGKILL); each in its
    own session, so Ctrl-C does not reach it."""
    pin = "" if cpu is None else f"os.sched_setaffinity(0, {{{cpu}}})\n"
    sched = "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n" if idle else ""
    code = (f"import ctypes, os, time\nctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, 9, 0, 0, 0)\n"
            f"if os.getppid() != {os.getpid()}: raise SystemExit\n{pin}{sched}"
            f"end = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass")
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                             stdin=subprocess.DEVNULL) for _ in range(n)]


CALIBRATION = (("calibrate-fixed", "--no-budget"), ("calibrate-cheapest", "--level=-1"))


def calibrate(launch: Path, base: Path, overrides: dict, cpu: int, deadline_ms: float | None,
              seconds: float, console: Console, stop: _Stop, hogs: int = HOGS,
              prefix: str = "") -> tuple[Threat | None, list[str]]:
    """The stress threat (rtinfer.cli.stress), measured in place: two short runs of the
    launched stack under the load (the policy and `hogs` busy processes on `cpu`; 0: the
    policy alone there) at a loose deadline, at fixed full depth and pinned at the cheapest
    budget level (run directories <prefix>calibrate-fixed and -cheapest); their cycles' chunk
    times give the deadline (unless --deadline-ms gave one). (None, errors) if stopped or a
    run gave no samples."""
    cal_s = calibration_seconds(seconds)
    console.print(f"calibrating the deadline in place: {cal_s:g} s at fixed full "
                  f"depth and {cal_s:g} s at the cheapest level, {load_line(hogs, cpu)}"
                  " ...", highlight=False)
    loose = launch_overrides(None, CALIBRATE_DEADLINE_MS, "cpu")
    samples, errors = [], []
    for name, budget in CALIBRATION:
        if stop.signum is not None:
            return None, errors
        rd = base / f"{prefix}{name}"
        rd.mkdir(parents=True, exist_ok=True)
        r = run_once(launch, cal_s, rd, {**overrides, **loose, "vars.budget": budget},
                     console, f"rtinfer demo: {prefix}{name}", stop, stress=hogs, pin_cpu=cpu)
        errors += [f"{name}: {ln}" for ln in r.get("error", [])]
        try:
            from rtinfer.realtime.trace import read_trace
            chunk_ms = chunk_complete_ms(read_trace(rd / "policy.trace"),
                                         read_trace(rd / "controller.trace"))
        except (OSError, ValueError):
            chunk_ms = []
        samples.append(chunk_ms[WARMUP_CYCLES:])  # the first WARMUP_S: start-up, no samples
    try:
        threat = choose_deadline(*samples, given_ms=deadline_ms)
    except ValueError:
        return None, errors
    threat = Threat(**{**threat.report(), "load": load_line(hogs, cpu)})
    console.print(f"{prefix.rstrip('-') or 'stress'} deadline {threat.deadline_ms:g} ms: "
                  f"{threat.how}; in calibration {percent_text(threat.fixed_late)} of fixed "
                  "full-depth cycles late, "
                  f"{percent_text(threat.cheapest_late)} at the cheapest level", highlight=False)
    return threat, errors


def launcher_command(launch: Path, run_dir: Path, seconds: float, overrides: dict,
                     record: str | None = None) -> list[str]:
    """The launcher, started through rtinfer.launch.child so that it gets PR_SET_PDEATHSIG
    (SIGTERM: an orderly stop of its nodes) when the demo dies; record: its --record."""
    sets = [f"--set={k}={v}" for k, v in {**overrides, "seconds": seconds}.items()]
    rec = [] if record is None else ["--record", record]
    return [sys.executable, "-m", "rtinfer.launch.child", "--name", "launcher",
            "--parent", str(os.getpid()), "--", SUPERVISOR, str(launch),
            "--run-dir", str(run_dir), "--seconds", str(seconds + 60), *rec, *sets]


def run_once(launch: Path, seconds: float, run_dir: Path, overrides: dict, console: Console,
             title: str, stop: _Stop, stress: int = 0, pin_cpu: int | None = None,
             record: str | None = None) -> dict:
    """One launched run; `stress` busy processes beside it; pin_cpu: the policy node's main
    thread (its compute) and those processes (SCHED_IDLE) pinned to that CPU, its other
    threads and the launcher, sim and monitor kept off it (the node re-pinned each second, so
    a thread it starts later is placed too)."""
    spec = load(launch, overrides)
    endpoints = [e.address(run_dir) for e in spec.endpoints.values()]
    cmd = launcher_command(launch, run_dir, seconds, overrides, record)
    mine = os.sched_getaffinity(0)
    if pin_cpu is not None and len(mine - {pin_cpu}) > 0:
        os.sched_setaffinity(0, mine - {pin_cpu})  # the launcher, sim and monitor inherit it
    with open(run_dir / "console.log", "w") as log:
        # Its own session: a terminal's Ctrl-C reaches the demo only, which forwards it once.
        stop.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
    if stop.signum is not None:  # a signal came before the launcher existed
        stop.forward(stop.signum)
    proc = stop.proc
    hogs = _stress(stress, seconds + 30, pin_cpu, idle=pin_cpu is not None) \
        if stress and stop.signum is None else []
    dash = Dashboard(endpoints, title)
    next_pin = 0.0
    try:
        with Live(dash.render(), console=console, refresh_per_second=4) as live:
            while proc.poll() is None:
                if pin_cpu is not None and time.monotonic() >= next_pin:
                    pinned = pin_tasks(proc.pid, "rtinfer.inference.node", pin_cpu)
                    next_pin = time.monotonic() + (1.0 if pinned else 0.1)
                dash.poll(100)
                live.update(dash.render())
            dash.poll(0)  # what the nodes sent as they stopped
            live.update(dash.render())
        if not console.is_terminal:
            console.line()  # a log file gets the table's last line ended (no "┘{")
    finally:
        os.sched_setaffinity(0, mine)
        for h in hogs:
            h.kill()
            h.wait()
        if proc.poll() is None:  # only on an error in this loop: an orderly stop first
            proc.terminate()
        proc.wait()
        dash.close()
    report = collect_report(run_dir, dash.latest, proc.returncode,
                            robots=int(overrides.get("robots", 0)))
    if stop.signum is not None:
        report["stopped_by"] = signal.Signals(stop.signum).name
    return report


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
        out.append(_read(run_dir / f"sim_report-{k}.json"))
        k += 1
    return out


def _robot_entry(k: int, sim: dict, mon: dict, ended: dict) -> dict:
    """Cell k's entry: its sim report's figures, and the monitor's for its controller
    (controller-k: cycles and deadline misses; None where it has none); "ended": why the
    launcher ended this robot before the run did (launch_summary.json), else None."""
    m, c = sim.get("metrics", {}), sim.get("controller", {})
    resolved = m.get("resolved", 0)
    own = mon.get("robots", {}).get(f"controller-{k}", {})
    return {"robot": f"cell-{k}", "task": sim.get("task"),
            "cycles": own.get("cycles"), "deadline_misses": own.get("misses"),
            "objects": {x: m.get(x, 0) for x in ("spawned", "correct", "wrong", "missed",
                                                 "dropped")},
            "success_rate": m["correct"] / resolved if resolved else None,
            "e2e_ms": {x: sim.get("e2e_ms", {}).get(x) for x in ("p50", "p99", "max")},
            "chunks_accepted": c.get("chunks_accepted"), "late_waypoints": c.get("late_waypoints"),
            "late_ticks": c.get("late_ticks"), "ended": ended.get(str(k))}


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
    sim = _merged_fleet([s for s in fleet if s] or [{}]) if fleet else \
        _read(run_dir / "sim_report.json")
    mon = _read(run_dir / "monitor_report.json")
    # A report a full disk kept out: the monitor's last health carries the same counts
    sims = [(f"sim_report-{k}.json", r) for k, r in enumerate(fleet)] if fleet else \
        [("sim_report.json", sim)]
    missing = [n for n, r in [("monitor_report.json", mon), *sims] if not r]
    said = latest.get("monitor", {}).get("counters", {})
    m, stages = sim.get("metrics", {}), mon.get("stages_ms", {})
    e2e, ttft = stages.get("e2e") or sim.get("e2e_ms", {}), stages.get("ttft", {})
    resolved = m.get("resolved", 0)
    pol = latest.get("policy", {}).get("counters", {})
    out = {
        "exit_code": exit_code, "run_dir": str(run_dir),
        "cycles": mon.get("cycles", said.get("cycles",
                                             sim.get("controller", {}).get("chunks_accepted"))),
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
        "controller": sim.get("controller", {}), "policy": pol,
        # the limits the robot enforced (clamps) and what its sockets dropped: never silent
        "stack": sim.get("stack", {}), "bus": sim.get("bus", {}),
        "sim_s": sim.get("sim_s"), "task": sim.get("task"),
        "scheduling": scheduling(run_dir),
    }
    camera = _read(run_dir / "camera_report.json")
    if camera or "camera" in sim:
        out["camera"] = camera_figures(camera, sim.get("camera", {}))
    if fleet:
        ended = _read(run_dir / "launch_summary.json").get("robots_ended", {})
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
    out = [ln for ln in console if (ln.startswith("[launch]") and "for good" in ln)
           or (not ln.startswith("[") and "error" in ln.lower() or ln.startswith("launch:"))]
    summary = _read(run_dir / "launch_summary.json").get("nodes", {})
    for name, node in summary.items():
        if node.get("state") == "failed" or (node.get("last_exit") or 0) > 0:
            last = _lines(run_dir / f"{name}.log")[-1:]
            out += [f"[{name}] {ln}  (log: {run_dir / f'{name}.log'})" for ln in last]
    return list(dict.fromkeys(out)) or [f"the launcher exited without a reason; see "
                                        f"{run_dir / 'console.log'}"]


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def launch_overrides(policy: str | None, deadline_ms: float | None, stress: str | None, *,
                     seed: int | None = None, instruction: str | None = None,
                     belt_speed: float | None = None, realtime: bool = True,
                     camera_hz: float | None = None) -> dict:
    """`--set` overrides for the launch file: the model directory, the task (cell seed,
    class -> bin instruction, belt speed), the camera's rate (conveyor_vision.yaml only),
    the nodes' scheduling (realtime False: no node's
    cpus or priority is applied), and the deadline with the monitor's budget
    margins scaled to it (lower the budget below 20% slack, raise it back above 50%, as the
    node's own budget does); --stress defaults to STRESS_DEADLINE_MS."""
    out = {} if policy in (None, "expert") else {"vars.model": policy}
    if not realtime:
        out["realtime"] = "false"
    if seed is not None:
        out["vars.seed"] = str(seed)
    if instruction is not None:
        out["vars.instruction"] = instruction
    if belt_speed is not None:
        out["vars.belt_speed"] = f"{belt_speed:g}"
    if camera_hz is not None:
        out["vars.camera_hz"] = f"{camera_hz:g}"
    if stress and deadline_ms is None:
        deadline_ms = STRESS_DEADLINE_MS
    if deadline_ms is not None:  # the monitor's margins follow it (rtinfer.realtime.deadline)
        out["deadline_ms"] = f"{deadline_ms:g}"
    return out


def model_dir(policy: str | None) -> Path | None:
    """The model directory for --policy (None for the expert), absolute; DemoError naming
    the path the user gave when it is not a model directory."""
    if policy == "expert":
        return None
    if policy is None:
        path = zoo_model()
        if not (path / "graphs.json").is_file():
            raise DemoError(f"the shipped model {path} is missing (graphs.json not found): "
                            "reinstall rtinfer, or run with --policy expert")
        return path
    path = Path(policy).expanduser()
    if not path.exists():
        raise DemoError(f"--policy {policy}: no such directory; give a model directory "
                        "(e.g. one written by `rtinfer export`) or --policy expert")
    if not (path / "graphs.json").is_file():
        raise DemoError(f"--policy {policy}: not a model directory (no graphs.json in it); "
                        "give one written by `rtinfer export`, or --policy expert")
    return path.resolve()


def takes_frames(model: Path | None) -> bool:
    """Whether the policy in model directory `model` reads camera frames (its obs_spec.json
    has image inputs); DemoError when that file is there but not a valid spec."""
    spec = None if model is None else model / "obs_spec.json"
    if spec is None or not spec.is_file():
        return False
    try:
        return bool(ObsSpec.load(spec).images)
    except (OSError, ValueError) as e:
        raise DemoError(f"--policy {model}: {spec} is not a valid observation spec ({e}); "
                        "re-package the policy") from None


def check_camera(vision: bool, robots: int, camera_hz: float | None) -> None:
    """--camera-hz needs a camera policy, in (0, 240]; a camera policy runs one cell."""
    if camera_hz is not None and not vision:
        raise DemoError(f"--camera-hz {camera_hz:g}: this policy takes no camera frames; "
                        "leave it out, or give a camera policy's --policy")
    if camera_hz is not None and not (math.isfinite(camera_hz) and 0 < camera_hz <= 240):
        raise DemoError(f"--camera-hz {camera_hz:g}: give frames per second in (0, 240], "
                        "e.g. 30")
    if vision and robots > 1:
        raise DemoError(f"--robots {robots} with a camera policy: the fleet launch has no "
                        "cameras; run it with one robot")


def camera_figures(camera: dict, sim: dict) -> dict:
    """The camera's part of the report: what the camera process rendered (camera_report.json)
    and what the sim did with its frames (its report's "camera": sent with an observation,
    observations skipped for want of a frame or for a frame older than the deadline, the
    frames' age when sent)."""
    return {"camera": sim.get("camera", camera.get("camera")), "hz": camera.get("hz"),
            "shape": sim.get("shape", camera.get("shape")), "rendered": camera.get("frames"),
            "render_ms": camera.get("render_ms"), "dropped": camera.get("dropped"),
            "frames_sent": sim.get("sent"), "skipped_no_frame": sim.get("no_frame"),
            "skipped_stale": sim.get("stale"), "frames_bad": sim.get("bad"),
            "frame_age_ms": sim.get("frame_age_ms")}


def check_fleet(robots: int, policy, stress, seed, instruction, png) -> None:
    """--robots N needs the learned policy and gives each cell its own seed (k) and
    instruction: the options that would contradict that are refused."""
    if robots < 1:
        raise DemoError(f"--robots {robots}: give 1 or more robots")
    if robots == 1:
        return
    clash = [o for o, v in (("--policy expert", policy == "expert"), ("--stress", stress),
                            ("--seed", seed is not None), ("--instruction", instruction),
                            ("--png", png)) if v]
    if clash:
        raise DemoError(f"--robots {robots} with {', '.join(clash)}: a fleet runs the learned "
                        "policy on cells seeded 0..N-1, each with its own instruction; leave "
                        f"{'them' if len(clash) > 1 else 'it'} out")


def check_output(option: str, path: str | None) -> None:
    """An output file must be writable where it is asked for, before the run starts."""
    if path is None:
        return
    p = Path(path).expanduser()
    parent = p.parent
    if p.is_dir():
        raise DemoError(f"{option} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise DemoError(f"{option} {path}: directory {parent} does not exist; create it first "
                        "or write elsewhere")
    if not os.access(parent, os.W_OK):
        raise DemoError(f"{option} {path}: directory {parent} is not writable")


def check_options(seconds: float, deadline_ms: float | None, report: str | None,
                  png: str | None) -> None:
    if not (math.isfinite(seconds) and seconds > 0):
        raise DemoError(f"--seconds {seconds:g}: must be a positive number of seconds")
    if deadline_ms is not None and not (math.isfinite(deadline_ms) and deadline_ms > 0):
        raise DemoError(f"--deadline-ms {deadline_ms:g}: must be a positive number of ms")
    check_output("--report", report)
    check_output("--png", png)
    if png is not None:
        from importlib.util import find_spec
        if find_spec("matplotlib") is None:
            raise DemoError(f"--png {png}: needs matplotlib (pip install 'rtinfer[viz]')")


def run(seconds: float = 60.0, *, policy: str | None = None, report: str | None = None,
        png: str | None = None, stress: str | None = None, run_dir: str | None = None,
        deadline_ms: float | None = None, seed: int | None = None,
        instruction: str | None = None, belt_speed: float | None = None,
        json_out: bool = False, robots: int = 1, realtime: bool = True,
        record: str | None = None, camera_hz: float | None = None) -> int:
    """policy: None (the shipped model), "expert", or a model directory. deadline_ms: the
    end-to-end deadline (None: the launch file's; see launch_overrides). record: an .mcap
    file the run is recorded to (the launcher's --record; one run only). camera_hz: a camera
    policy's frame rate (None: the launch file's). Returns the exit
    status: 0, 1 (a run failed), 2 (refused before starting), 128 + signal (stopped)."""
    stop = _Stop()
    with on_signals(stop):
        return _run(seconds, policy, report, png, stress, run_dir, deadline_ms, seed,
                    instruction, belt_speed, json_out, stop, robots, realtime, record,
                    camera_hz)


def check_stress(stress: str | None, model: Path | None) -> None:
    if stress is not None and stress not in STRESS_MODES:
        raise DemoError(f"--stress {stress}: give one of {', '.join(STRESS_MODES)}")
    if stress == "near-deadline" and model is None:
        raise DemoError("--stress near-deadline with --policy expert: the expert has no chunk "
                        "time to set a deadline from; run it with the learned policy")


def _run(seconds, policy, report, png, stress, run_dir, deadline_ms, seed, instruction,
         belt_speed, json_out, stop: _Stop, robots: int = 1, realtime: bool = True,
         record: str | None = None, camera_hz: float | None = None) -> int:
    console = Console(stderr=True)
    try:
        check_options(seconds, deadline_ms, report, png)
        if record is not None:
            if stress is not None:
                raise DemoError(f"--record {record}: records one run; --stress makes several, "
                                "so drop one of the two")
            try:
                record = str(check_record(record))
            except LaunchError as e:
                raise DemoError(str(e)) from None
        check_fleet(robots, policy, stress, seed, instruction, png)
        model = model_dir(policy)
        check_stress(stress, model)
        vision = takes_frames(model)
        check_camera(vision, robots, camera_hz)
        base = (Path(run_dir).expanduser() if run_dir
                else Path(tempfile.mkdtemp(prefix="rtinfer-demo-")))
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DemoError(f"--run-dir {run_dir}: cannot create it ({exc.strerror})") from None
        why = unwritable(base)
        if why:
            raise DemoError(f"--run-dir {run_dir}: not writable ({why}); give a writable "
                            "folder")
    except DemoError as exc:
        print(f"rtinfer demo: {exc}", file=sys.stderr)
        return 2
    launch = launch_file(EXPERT_LAUNCH if model is None else FLEET_LAUNCH if robots > 1
                         else VISION_LAUNCH if vision else MODEL_LAUNCH)
    # the launch settings every run of this demo shares (launch_overrides' keywords)
    task = {"seed": seed, "instruction": instruction, "belt_speed": belt_speed,
            "realtime": realtime, "camera_hz": camera_hz}
    if stress == "near-deadline":
        out = near_deadline(launch, base.resolve(), str(model), deadline_ms, seconds, task,
                            console, stop, png)
        runs_done = [out["unpressured"]] + [r for c, _ in CONDITIONS for k, r in
                                            out.get(c, {}).items() if k != "calibration"]
    else:
        results = _runs(launch, base.resolve(), model, robots, stress, deadline_ms, seconds,
                        task, console, stop, png, record)
        runs_done = [r for k, r in results.items() if k != "calibration"]
        out = results.get("nominal", {}) if stress is None else results
    text = json.dumps(out, indent=None if json_out else 1)
    if report:
        why = write_report(Path(report).expanduser(), text + "\n")
        console.print(f"report not written to {report}: {why}" if why else
                      f"report written to {report}")
    print(text, flush=True)
    if stop.signum is not None:
        console.print(f"stopped by {signal.Signals(stop.signum).name}: partial report above")
        return 128 + stop.signum
    return 0 if runs_done and all(r["exit_code"] == 0 for r in runs_done) else 1


def _one(launch: Path, base: Path, name: str, seconds: float, overrides: dict, console: Console,
         stop: _Stop, png: str | None, single: bool, hogs: int = 0, cpu: int | None = None,
         deadline_ms: float | None = None, record: str | None = None) -> dict:
    """One named run in base/name, its errors on the console; deadline_ms: audit its traces
    against it (rtinfer.cli.pressure.audit) and say how late it was."""
    rd = base / name
    rd.mkdir(parents=True, exist_ok=True)
    r = run_once(launch, seconds, rd, overrides, console, f"rtinfer demo: {name}", stop,
                 stress=hogs, pin_cpu=cpu, record=record)
    if record is not None:
        r["recording"] = record
    for line in r.get("error", []):
        console.print(f"[red]error[/red] {name}: {line}", highlight=False, soft_wrap=True)
    if deadline_ms is not None:
        r["late_fraction"] = late_fraction(r)
        r["audit"] = _audit(rd, deadline_ms)
        console.print(f"{name}: {percent_text(r['late_fraction'])} of {r['cycles']} cycles late, "
                      f"sorted {sorted_text(r)}", highlight=False)
    trace = rd / "controller.trace"
    if png and trace.exists() and stop.signum is None:
        from rtinfer.monitor.report import main as report_main
        report_main(str(trace), png=png if single else
                    str(Path(png).with_name(f"{Path(png).stem}-{name}.png")))
    return r


def _audit(run_dir: Path, deadline_ms: float) -> dict | None:
    from rtinfer.realtime.trace import read_trace
    holds = hold_intervals(_read(run_dir / "monitor_report.json"))
    try:
        return audit(read_trace(run_dir / "policy.trace"), read_trace(run_dir / "controller.trace"),
                     deadline_ms, holds)
    except (OSError, ValueError):
        return None


def _runs(launch, base, model, robots, stress, deadline_ms, seconds, task, console, stop,
          png, record: str | None = None) -> dict:
    """The plain demo ({"nominal": run}) or `--stress cpu` (calibration, stress-fixed,
    stress-budget: the budget's part; busy-unscheduled, busy-scheduled: the scheduling's)."""
    overrides = launch_overrides(None if model is None else str(model), deadline_ms, stress,
                                 **task)
    if robots > 1:
        overrides["robots"] = str(robots)
    runs, threat, cpu = [("nominal", {}, 0, True)], None, None
    if stress == "cpu":
        # the expert has no policy node to load: free-floating hogs, STRESS_DEADLINE_MS
        n = 2 * (os.cpu_count() or 2) if model is None else HOGS
        # the budget's part (hogs under SCHED_IDLE on the policy's CPU), then the
        # scheduling's: a CPU-bound neighbour at normal priority on every CPU, the budget on
        busy = len(os.sched_getaffinity(0))
        runs = [("stress-fixed", {"vars.budget": "--no-budget"}, n, True),
                ("stress-budget", {}, n, True),
                ("busy-unscheduled", {"realtime": "false"}, busy, False),
                ("busy-scheduled", {}, busy, False)]
        if model is not None:
            cpu = policy_cpu()
            threat, errors = calibrate(launch, base, overrides, cpu, deadline_ms,
                                       seconds, console, stop)
            for line in errors:
                console.print(f"[red]error[/red] {line}", highlight=False, soft_wrap=True)
            if threat is not None:
                overrides = launch_overrides(str(model), threat.deadline_ms, stress, **task)
    results = {}
    for name, extra, hogs, on_policy_cpu in runs:
        if stop.signum is not None:
            break
        ov = {**overrides, **extra}
        results[name] = _one(launch, base, name, seconds, ov, console, stop, png,
                             len(runs) == 1, hogs, cpu if on_policy_cpu else None,
                             float(ov["deadline_ms"]) if len(runs) > 1 else None,
                             record if len(runs) == 1 else None)
    if len(runs) > 1:
        results = {"calibration": None if threat is None else threat.report(), **results}
        console.print(stress_table(results))
        console.print(scheduling_table(results))
    return results


def near_deadline(launch: Path, base: Path, model: str, deadline_ms: float | None,
                  seconds: float, task: dict, console: Console, stop: _Stop,
                  png: str | None) -> dict:
    """`--stress near-deadline` (rtinfer.cli.pressure): unpressured at the launch file's
    deadline, then per load of CONDITIONS a deadline calibrated under it and fixed full depth
    against the budget controller at it; the runs, their audits and the targets' verdict."""
    cpu = policy_cpu()
    out: dict = {"unpressured": _one(launch, base, "unpressured", seconds,
                                     launch_overrides(model, None, None, **task), console,
                                     stop, png, False, 0, cpu)}
    for cond, hogs in CONDITIONS:
        if stop.signum is not None:
            break
        threat, errors = calibrate(launch, base, launch_overrides(model, None, None, **task),
                                   cpu, deadline_ms, seconds, console, stop, hogs, f"{cond}-")
        for line in errors:
            console.print(f"[red]error[/red] {line}", highlight=False, soft_wrap=True)
        if threat is None:
            continue
        pair = out[cond] = {"calibration": threat.report()}
        overrides = launch_overrides(model, threat.deadline_ms, "near-deadline", **task)
        extras, done = dict(ROLES), {role: [] for role, _ in ROLES}
        for k, role in enumerate(ORDER):
            if stop.signum is None:
                done[role].append(_one(launch, base, f"{cond}-{k + 1}-{role}", seconds,
                                       {**overrides, **extras[role]}, console, stop, png,
                                       False, hogs, cpu, threat.deadline_ms))
        for role, runs in done.items():
            if runs:
                pair[role] = pool(runs)
    out["targets"] = verdict(out)
    console.print(runs_table(f"a policy near its deadline: fixed full depth vs the budget "
                             f"controller, unpressured sorted {sorted_text(out['unpressured'])}",
                             pressure_columns(out), deadline_row=True))
    for line in verdict_lines(out["targets"]):
        console.print(line, highlight=False)
    return out
