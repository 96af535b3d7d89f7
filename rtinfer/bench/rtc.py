"""Real-time chunking on the conveyor cell across a delayed network: success and the join
discontinuity against the added delay, RTC against no conditioning against the tracker's blend.

For each added round-trip delay (--delays-ms; half each way, each direction jittered by
--jitter uniform in [0, jitter * delay / 2]) and each arm, on a fresh set of processes:
  robot   the conveyor cell (controllers.run with the MuJoCo sim, started by module name: the
          robot side ranks above rtinfer), --seconds of sim time, a seeded cell
  proxies rtinfer.bench.delay_proxy on the obs way (robot -> node) and the action way
  node    rtinfer.inference.node serving --model at fixed full quality (--no-budget)
Arms: rtc (the robot sends its committed prefix: --rtc; the policy conditions on it), none
(no prefix, no blend: each new chunk is re-planned from the reference as is) and blend (no
prefix, the tracker's old -> new smoothstep over --blend-ms). The deadline of every arm is
--deadline-ms plus the added delay, so that the unconditioned arms can drive at all (the
issue's "raising the deadline lets it drive"); rtc's chunks are fresh by their window too.
Per run: success (correct / resolved objects, and correct per sim minute), the join
discontinuity (rtinfer.bench.rtc_joins: position and velocity jump per axis at each chunk
switch, p50/p99/max, from the robot's trace of applied cycles and the chunks it took, seen
by a recorder on the robot's action endpoint), holds, chunks applied and conditioned,
prefix mismatches, and stale applied: applied cycles (the trace) whose apply - capture is
past the deadline and not under a conditioned window (docs/wire.md): 0 is the contract.
--lockstep: the same sweep with the delay in sim time (examples.conveyor_sorting.rtc_lockstep:
the real controller, Commitments, policy and CommittedIntake on one sim clock), deterministic
and apart from the host's load: whether the policy with RTC can sort at a delay in principle;
--expert there drives with the scripted expert instead (what the task allows).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.bench.rtc_joins import join_jumps, plot, spread
from rtinfer.inference.node_config import FLOW_RTC
from rtinfer.realtime.complaints import say
from rtinfer.realtime.trace import read_trace
from rtinfer.transport.bus import Subscriber

ARMS = ("rtc", "none", "blend")
AXES = ["x", "y", "z"]
ROBOT_YAML = Path(__file__).resolve().parents[2] / "examples" / "conveyor_sorting" / "robot.yaml"
READY_S = 120.0


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _robot_yaml(tmp: Path, blend_ms: float) -> str:
    """The cell's robot.yaml, with the tracker's blend where the arm asks for one."""
    text = ROBOT_YAML.read_text()
    if blend_ms > 0:
        text = text.replace(
            "control:\n  rate_hz: 1000\n",
            f"control:\n  rate_hz: 1000\n  blend_ns: {int(blend_ms * 1e6)}\n",
        )
    path = tmp / "robot.yaml"
    path.write_text(text)
    return str(path)


def run_point(arm: str, delay_ms: float, seed: int, a, tmp: Path) -> dict:
    tmp.mkdir(parents=True)
    ep = {n: f"ipc://{tmp}/{n}" for n in ("obs_r", "obs_n", "act_n", "act_r")}
    deadline_ms = a.deadline_ms + delay_ms
    jitter = a.jitter * delay_ms / 2
    py = sys.executable
    procs = []
    try:
        for up, down, name in (
            (ep["act_n"], ep["act_r"], "act"),
            (ep["obs_r"], ep["obs_n"], "obs"),
        ):
            procs.append(
                _start(
                    [
                        py,
                        "-m",
                        "rtinfer.bench.delay_proxy",
                        "--upstream",
                        up,
                        "--downstream",
                        down,
                        "--delay-ms",
                        str(delay_ms / 2),
                        "--jitter-ms",
                        str(jitter),
                        "--seed",
                        str(seed),
                        "--stats",
                        str(tmp / f"proxy_{name}.json"),
                    ],
                    tmp / f"proxy_{name}.log",
                )
            )
        procs.append(
            _start(
                [
                    py,
                    "-m",
                    "rtinfer.inference.node",
                    "--model",
                    a.model,
                    "--backend",
                    "onnx",
                    "--threads",
                    "1",
                    "--obs",
                    ep["obs_n"],
                    "--actions",
                    ep["act_n"],
                    "--deadline-ms",
                    str(deadline_ms),
                    "--name",
                    "policy",
                    "--no-budget",
                    "--flow-rtc",
                    a.flow_rtc,
                ],
                tmp / "node.log",
            )
        )
        rec = Subscriber(ep["act_r"], ["action_chunk"])
        robot = _start(
            [
                py,
                "-m",
                "controllers.run",
                "--hardware",
                "examples.conveyor_sorting.sim_node:ConveyorSim",
                "--config",
                _robot_yaml(tmp, a.blend_ms if arm == "blend" else 0.0),
                "--model",
                a.model,
                "--obs",
                ep["obs_r"],
                "--actions",
                ep["act_r"],
                "--deadline-ms",
                str(deadline_ms),
                "--report",
                str(tmp / "robot.json"),
                "--trace",
                str(tmp / "robot.trace"),
                "--set",
                f"seconds={a.seconds}",
                "--set",
                f"seed={seed}",
                "--set",
                f"wait_s={READY_S}",
                *(["--rtc"] if arm == "rtc" else []),
            ],
            tmp / "robot.log",
        )
        procs.append(robot)
        chunks = _record(rec, robot, READY_S + a.seconds * 20 + 60)
        rec.close()
    finally:
        _stop(procs)
    if not (tmp / "robot.json").is_file():
        tail = (tmp / "robot.log").read_text().strip().splitlines()[-3:]
        raise RuntimeError(
            f"the robot of {arm} at {delay_ms} ms wrote no report (exit "
            f"{robot.returncode}): {' | '.join(tail)}"
        )
    return figures(
        json.loads((tmp / "robot.json").read_text()), tmp / "robot.trace", chunks, deadline_ms
    )


def _record(rec: Subscriber, robot: subprocess.Popen, limit_s: float) -> dict:
    """Every waypoint the robot's action endpoint carries, until the robot exits."""
    chunks: dict[tuple, dict] = {}
    end = time.monotonic() + limit_s
    while robot.poll() is None and time.monotonic() < end:
        env = rec.recv(50)
        if env is not None:
            keep_waypoint(chunks, env)
    if robot.poll() is None:
        raise RuntimeError(f"the robot did not finish within {limit_s:.0f} s")
    return whole_chunks(chunks)


def keep_waypoint(chunks: dict, env) -> None:
    """An action_chunk waypoint the robot was sent, into chunks[(cycle, capture)]."""
    b, capture = env.body, env.stamps["capture"]
    c = chunks.setdefault(
        (b["cycle"], capture),
        {
            "capture": capture,
            "start_ns": b["start_ns"],
            "period_ns": b["period_ns"],
            "rows": {},
            "count": b["count"],
        },
    )
    c["rows"][b["index"]] = np.asarray(b["values"], np.float64)


def whole_chunks(chunks: dict) -> dict:
    """Each recorded chunk with its leading run of waypoints stacked as `values`."""
    out = {}
    for key, c in chunks.items():
        n = 0
        while n in c["rows"]:
            n += 1
        if n:
            out[key] = {**c, "values": np.stack([c["rows"][i] for i in range(n)])}
    return out


def figures(report: dict, trace: Path, chunks: dict, deadline_ms: float) -> dict:
    c, m = report["controller"], report["metrics"]
    applied = sorted(
        (
            r["stamps"]["apply"],
            (r["cycle"], r["stamps"]["capture"]),
            r["fields"].get("window_ms", 0.0),
        )
        for r in read_trace(trace)
        if "apply" in r["stamps"]
    )
    stale = sum(
        1
        for apply, (_, cap), window in applied
        if apply - cap > deadline_ms * 1e6 and apply - cap >= window * 1e6
    )
    pos, vel = join_jumps([(a, k) for a, k, _ in applied], chunks, len(AXES))
    return {
        "success_rate": round(m["success_rate"], 4),
        "correct": m["correct"],
        "resolved": m["resolved"],
        "throughput_per_min": round(m["throughput_per_min"], 2),
        "switches": len(pos),
        "jump_pos_m": spread(pos, AXES),
        "jump_vel_m_s": spread(vel, AXES),
        "holds": c["holds"],
        "chunks_accepted": c["chunks_accepted"],
        "chunks_conditioned": c.get("chunks_conditioned", 0),
        "committed_sent": c.get("committed_sent", 0),
        "prefix_mismatch": c.get("prefix_mismatch", 0),
        "rejected_stale": c["rejected_stale"],
        "stale_applied": stale,
        "e2e_ms_p50": report["e2e_ms"].get("p50"),
    }


def lockstep(a) -> list[dict]:
    """The same sweep in lockstep (examples.conveyor_sorting.rtc_lockstep, by module name:
    the cell, the controller and the policy on one sim clock, the delay in sim time)."""
    cmd = [
        sys.executable,
        "-m",
        "examples.conveyor_sorting.rtc_lockstep",
        "--json",
        "--model",
        a.model,
        "--delays-ms",
        *map(str, a.delays_ms),
        "--runs",
        str(a.runs),
        "--seconds",
        str(a.seconds),
        "--seed",
        str(a.seed),
        "--deadline-ms",
        str(a.deadline_ms),
        "--jitter",
        str(a.jitter),
        "--blend-ms",
        str(a.blend_ms),
        "--flow-rtc",
        a.flow_rtc,
        *(["--expert"] if a.expert else []),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(
            f"bench rtc --lockstep: the lockstep run failed (exit "
            f"{out.returncode}): {out.stderr.strip()[-2000:]}"
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(a) -> dict:
    points = lockstep(a) if a.lockstep else []
    with tempfile.TemporaryDirectory(prefix="rtinfer-bench-rtc-") as d:
        for delay in [] if a.lockstep else a.delays_ms:
            for r in range(a.runs):
                for arm in ARMS:  # interleaved: a busy host's load on every arm alike
                    try:
                        fig = run_point(arm, delay, a.seed + r, a, Path(d) / f"{arm}-{delay}-{r}")
                    except RuntimeError as e:  # a run lost to the host: said, retried once
                        say("bench rtc", f"{e}; running it again", error=False)
                        fig = run_point(arm, delay, a.seed + r, a, Path(d) / f"{arm}-{delay}-{r}b")
                    points.append({"arm": arm, "delay_ms": delay, "run": r, **fig})
    return {
        "bench": "rtc",
        "mode": "lockstep" if a.lockstep else "real time",
        "policy": "expert" if a.expert else "model",
        "model": a.model,
        "flow_rtc": a.flow_rtc,
        "seconds": a.seconds,
        "runs": a.runs,
        "deadline_ms": a.deadline_ms,
        "jitter": a.jitter,
        "blend_ms": a.blend_ms,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "points": points,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser("rtc", __doc__)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--delays-ms", type=float, nargs="+", default=[0.0, 50.0, 100.0, 200.0])
    p.add_argument("--runs", type=int, default=1, help="runs per delay and arm (seeds)")
    p.add_argument("--seconds", type=float, default=30.0, help="sim seconds per run")
    p.add_argument(
        "--deadline-ms",
        type=float,
        default=100.0,
        help="the deadline at 0 ms added delay (each delay adds itself)",
    )
    p.add_argument("--jitter", type=float, default=0.2, help="jitter as a fraction of delay")
    p.add_argument("--blend-ms", type=float, default=100.0, help="the blend arm's blend_ns")
    p.add_argument("--seed", type=int, default=1, help="the first run's cell seed")
    p.add_argument("--quick", action="store_true", help="one 4 s run per arm at 100 ms (tests)")
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="run the sweep in lockstep: the "
        "delay in sim time, deterministic, apart from the host's load",
    )
    p.add_argument(
        "--expert",
        action="store_true",
        help="with --lockstep: the scripted expert "
        "plans the model's horizon instead of the policy (what the task allows)",
    )
    p.add_argument(
        "--flow-rtc",
        default="condition",
        choices=FLOW_RTC,
        help="the node's flow_rtc: a flow policy's training-time conditioning or RTC guidance",
    )
    p.add_argument("--out", default=None, help="also write the result JSON here")
    p.add_argument("--plot", default=None, help="write success and join jump against delay (PNG)")
    a = p.parse_args(argv)
    if a.expert and not a.lockstep:
        p.error("--expert runs in lockstep only: add --lockstep")
    if a.quick:
        a.delays_ms, a.runs, a.seconds = [100.0], 1, 4.0
    result = run(a)
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    if a.plot:
        plot(result, a.plot)
    return emit("rtc", result, a.json)


if __name__ == "__main__":
    sys.exit(main())
