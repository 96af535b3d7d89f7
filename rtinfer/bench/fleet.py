"""Many robots at the policy rate: deadline met, e2e and chunks per inference CPU second.

For each fleet size N (--robots), the arrangements take turns in the same run (their order
rotating from one N to the next), each on a fresh set of processes:
  batched     one inference node (rtinfer.inference.node, N --obs endpoints) serving all N
              robots with its batched graphs: the robots waiting decode together, earliest
              deadline first, admission planned on the measured batch costs
  sequential  the same node with --batch 1: one cycle at a time, earliest deadline first,
              with admission control
  separate    N inference nodes, one per robot (the LeRobot way)
Each robot is a real process (controllers.bench_robot, started by module name; with
--addressed, the default, it receives only its own chunks) replaying the
model's recorded obs bodies (obs_stream.npz) at --rate-hz with real capture stamps, at a
seeded phase that is the same in every arrangement, and checking every waypoint with the
controller's own acceptance rules. Per arrangement, over the cycles of --seconds (after
--warmup): deadline_met (a cycle's chunk counts when every waypoint arrived within the
deadline of its capture and was accepted; over each robot's cycles from its first answer on,
so a robot refused, or admitted late, is counted under refused and refused_cycles instead),
e2e p50/p99 (capture -> last waypoint received, complete chunks), chunks_per_cpu_s (accepted
chunks per CPU second of the node processes only, from /proc/PID/stat), refused (the nodes'
robots_refused less robots_admitted_late, or robots never answered, whichever is more) and
identical (accepted chunks whose tokens equal plain greedy on the same observation,
recomputed here with TokenRunner(drafter="none")); deadline_met_worst_robot is the least
robot's share of its cycles met (a refused robot's count as missed). Nodes run at fixed full
quality (--no-budget) unless --budget. --cpu-hog N runs N CPU-bound processes beside every
arrangement (a Python spin loop each, the k-th pinned to CPU k mod the CPUs this bench may
use), from before its nodes start until they stop: a neighbour that takes a core.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.fleet_figures import ARRANGEMENTS, Greedy, plot, summarise
from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.model.obs_stream import FILE as STREAM_FILE
from rtinfer.realtime.complaints import say
from rtinfer.realtime.deadline import DEADLINE_MS
from rtinfer.transport.bus import Subscriber
from rtinfer.transport.wire import now_ns

ROBOT = "controllers.bench_robot"  # the robot side ranks above rtinfer: started by name
READY_S = 180.0  # 16 nodes loading their graphs on 2 cores take a while


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_ready(procs: list, logs: list[Path], what: str) -> None:
    """Until every process has printed its ready line; RuntimeError if one exits first."""
    end = time.monotonic() + READY_S
    pending = list(zip(procs, logs))
    while pending:
        p, log = pending[0]
        if "ready" in log.read_text():
            pending.pop(0)
            continue
        if p.poll() is not None or time.monotonic() > end:
            err = log.with_suffix(".err").read_text()[-2000:]
            raise RuntimeError(
                f"{what} ({log.stem}) did not get ready (exit {p.returncode}): {err}"
            )
        time.sleep(0.05)


def _start(cmd: list[str], log: Path, stdin=None) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, stdin=stdin, stdout=log.open("w"), stderr=log.with_suffix(".err").open("w")
    )


def _stop(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


SPIN = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def cpu_hogs(n: int) -> list[subprocess.Popen]:
    """n CPU-bound processes, the k-th pinned to the k-th CPU this process may use (mod)."""
    cpus = sorted(os.sched_getaffinity(0))
    return [
        subprocess.Popen([sys.executable, "-c", SPIN, str(cpus[k % len(cpus)])]) for k in range(n)
    ]


def run_point(arrangement: str, n: int, a, tmp: Path) -> dict:
    """One arrangement with n robots: started, measured, stopped. Raw records + CPU."""
    obs = [f"ipc://{tmp}/obs-r{i}" for i in range(n)]
    acts = [f"ipc://{tmp}/act-{j}" for j in range(n if arrangement == "separate" else 1)]
    node_opts = ["--model", a.model, "--deadline-ms", str(a.deadline_ms), "--threads", "1"]
    node_opts += [] if a.budget else ["--no-budget"]
    node_opts += ["--max-robots", str(a.max_robots)] if a.max_robots else []
    node_opts += [] if arrangement == "batched" else ["--batch", "1"]
    node_opts += ["--address-chunks"] if a.addressed else []
    plan = (
        [(["--obs", *obs], acts[0], "infer")]
        if len(acts) == 1
        else [(["--obs", obs[j]], acts[j], f"infer{j}") for j in range(n)]
    )
    nodes, robots, logs = [], [], []
    hogs = cpu_hogs(a.cpu_hog)
    health = Subscriber(acts, ["health"])
    rng = np.random.default_rng(a.seed)
    phases = rng.uniform(0, 1e3 / a.rate_hz, n)
    try:
        for obs_args, act, name in plan:
            logs.append(tmp / f"{name}.log")
            nodes.append(
                _start(
                    [
                        sys.executable,
                        "-m",
                        "rtinfer.inference.node",
                        *node_opts,
                        *obs_args,
                        "--actions",
                        act,
                        "--name",
                        name,
                    ],
                    logs[-1],
                )
            )
        _wait_ready(nodes, logs, "inference node")
        rlogs = []
        for i in range(n):
            rlogs.append(tmp / f"r{i}.log")
            robots.append(
                _start(
                    [
                        sys.executable,
                        "-m",
                        ROBOT,
                        "--name",
                        f"r{i}",
                        "--obs",
                        obs[i],
                        "--actions",
                        acts[i if arrangement == "separate" else 0],
                        "--model",
                        a.model,
                        "--robot",
                        a.robot,
                        "--stream",
                        a.stream,
                        "--offset",
                        str(i * 53),
                        "--rate-hz",
                        str(a.rate_hz),
                        "--phase-ms",
                        f"{phases[i]:.3f}",
                        "--deadline-ms",
                        str(a.deadline_ms),
                        "--out",
                        str(tmp / f"r{i}.npz"),
                        *(["--addressed"] if a.addressed else []),
                    ],
                    rlogs[-1],
                    stdin=subprocess.PIPE,
                )
            )
        _wait_ready(robots, rlogs, "bench robot")
        start = now_ns() + 200_000_000
        measure = start + int(a.warmup * 1e9)
        end = measure + int(a.seconds * 1e9)
        for r in robots:
            r.stdin.write(
                json.dumps({"start_ns": start, "measure_ns": measure, "end_ns": end}).encode()
                + b"\n"
            )
            r.stdin.close()
        last = {}
        cpu = {}
        for label, at in (("start", measure), ("end", end)):
            while now_ns() < at:
                env = health.recv(timeout_ms=max(1, min(100, (at - now_ns()) // 1_000_000)))
                if env is not None:
                    last[env.src] = env.body
            cpu[label] = ([cpu_s(p.pid) for p in nodes], [cpu_s(p.pid) for p in robots])
        for r in robots:
            r.wait(timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"bench robot exited {r.returncode}: see {tmp}")
        while (env := health.recv(timeout_ms=0)) is not None:
            last[env.src] = env.body
    finally:
        _stop(robots + nodes + hogs)
        health.close()
    records = []
    for i in range(n):
        with np.load(tmp / f"r{i}.npz", allow_pickle=False) as z:
            records.append({k: z[k] for k in z.files})
    return {
        "records": records,
        "node_cpu_s": sum(cpu["end"][0]) - sum(cpu["start"][0]),
        "robot_cpu_s": sum(cpu["end"][1]) - sum(cpu["start"][1]),
        **{
            k: sum(h["counters"].get(k, 0) for h in last.values())
            for k in ("robots_refused", "robots_admitted_late", "overloads")
        },
        "refusals": [
            line
            for log in logs
            for line in log.with_suffix(".err").read_text().splitlines()
            if "refused" in line
        ],
    }


def run(a) -> dict:
    raws = {}
    for k, n in enumerate(a.robots):
        order = [
            x
            for x in ARRANGEMENTS[k % 3 :] + ARRANGEMENTS[: k % 3]  # taking turns
            if x in a.arrangements
        ]
        for arrangement in order:
            with tempfile.TemporaryDirectory(prefix="rtinfer-fleet-") as tmp:
                raws[n, arrangement] = run_point(arrangement, n, a, Path(tmp))
            say("fleet", f"{n} robots, {arrangement}: done", error=False)
    greedy = Greedy(a.model, a.stream)  # after the runs: the check costs them nothing
    rows = []
    for n in a.robots:
        row = {"robots": n}
        for arrangement in a.arrangements:
            row[arrangement] = summarise(raws[n, arrangement], greedy, a.seconds)
        rows.append(row)
    return {
        "deadline_ms": a.deadline_ms,
        "rate_hz": a.rate_hz,
        "seconds": a.seconds,
        "warmup_s": a.warmup,
        "model": a.model,
        "stream": a.stream,
        "budget": "auto" if a.budget else "fixed full quality",
        "addressed": a.addressed,
        "cpu_hog": a.cpu_hog,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench fleet`: N robots at 20 Hz on one node, on N nodes (and batched)."""
    p = parser("fleet", main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument(
        "--stream",
        default=None,
        help="recorded obs bodies (.npz; default: the model's obs_stream.npz)",
    )
    p.add_argument(
        "--robot",
        default="examples.conveyor_sorting:robot.yaml",
        help="robot file the bench robots check chunks against",
    )
    p.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per point")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    p.add_argument("--quick", action="store_true", help="3 s points, 1.5 s warm-up (tests)")
    p.add_argument("--rate-hz", type=float, default=20.0, help="observations per robot")
    p.add_argument("--deadline-ms", type=float, default=DEADLINE_MS)
    p.add_argument("--max-robots", type=int, default=None, help="the node's --max-robots")
    p.add_argument(
        "--budget",
        action="store_true",
        help="let the nodes lower their budget (default: fixed full quality)",
    )
    p.add_argument("--seed", type=int, default=0, help="the robots' phases")
    p.add_argument(
        "--arrangements",
        nargs="+",
        choices=ARRANGEMENTS,
        default=ARRANGEMENTS,
        help="which arrangements to run (default: all three)",
    )
    p.add_argument(
        "--cpu-hog",
        type=int,
        default=0,
        metavar="N",
        help="N CPU-bound processes beside each arrangement, each pinned to a CPU",
    )
    p.add_argument(
        "--addressed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="nodes address each robot's chunks to it and robots take only their "
        "own (--address-chunks / --addressed); --no-addressed: every robot "
        "receives and checks every robot's chunks",
    )
    p.add_argument("--plot", default=None, help="write deadline-met against N (PNG)")
    a = p.parse_args(argv)
    if a.quick:
        a.seconds, a.warmup = 3.0, 1.5
    a.stream = a.stream or str(Path(a.model) / STREAM_FILE)
    if not Path(a.stream).is_file():
        p.error(
            f"--stream {a.stream}: no such file (record one: python -m "
            "examples.conveyor_sorting.record_obs_stream --out FILE)"
        )
    if min(a.robots) < 1:
        p.error("--robots: each fleet size must be at least 1")
    result = run(a)
    if a.plot:
        plot(result, a.plot)
    return emit("fleet", result, a.json)
