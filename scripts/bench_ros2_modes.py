"""The ROS 2 bridge's command modes side by side: `forward` (a Float64MultiArray setpoint per
control tick) against `trajectory_chunk` (one JointTrajectory per chunk), interleaved in one
run, each round a fresh plain rclpy arm, policy and bridge in a network namespace (root).

    .venv-ros2/bin/python scripts/bench_ros2_modes.py [--rounds 3] [--seconds 15]

Per run: the ROS side's rate and jitter of what the arm received (its receipt times: per
tick for forward, per chunk for trajectory_chunk), the controller's e2e (capture -> the
chunk's first setpoint committed, which is also when trajectory_chunk sends it), and for
trajectory_chunk the ROS-side e2e (capture -> the trajectory at the arm, the capture read
off the trajectory's own points), its transit (header stamp -> receipt) and lead (stamp ->
first point due). Prints one JSON line per run, then a summary table (medians over runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rtinfer.realtime.complaints import say  # noqa: E402
from tests.ros2_host import RosHost, read, stop  # noqa: E402

POLICY = "models/zoo/arm-reach-bc"
H, START_NS, PERIOD_NS = 10, 50_000_000, 50_000_000  # the policy's action spec
MODES = {
    "forward": [],
    "trajectory_chunk": [
        "--set",
        "controller=trajectory_chunk",
        "--set",
        "command=/arm/joint_trajectory_controller/joint_trajectory",
    ],
}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def intervals_ms(times_ns):
    return [(b - a) / 1e6 for a, b in zip(times_ns, times_ns[1:])]


def one_run(mode: str, seconds: float, tmp: Path) -> dict:
    arm_json, bridge_json = tmp / "arm.json", tmp / "bridge.json"
    for f in (arm_json, bridge_json):
        f.unlink(missing_ok=True)
    obs, act = f"ipc://{tmp}/obs", f"ipc://{tmp}/act"
    with RosHost("rtbench") as host:
        arm = host.python(
            "-m",
            "rtinfer_ros2.sim_arm",
            "--report",
            str(arm_json),
            "--ros-args",
            "-r",
            "__ns:=/arm",
        )
        policy = host.python(
            "-m",
            "rtinfer.inference.node",
            "--model",
            POLICY,
            "--obs",
            obs,
            "--actions",
            act,
            "--name",
            "policy",
            "--seconds",
            "600",
            stdout=-3,
        )
        bridge = host.python(
            "-m",
            "rtinfer_ros2",
            "--config",
            "rtinfer_ros2:arm.yaml",
            "--model",
            POLICY,
            "--obs",
            obs,
            "--actions",
            act,
            "--seconds",
            str(seconds),
            "--report",
            str(bridge_json),
            *MODES[mode],
            stdout=-3,
            stderr=-3,
        )
        try:
            bridge.wait(seconds + 60)
            time.sleep(0.6)  # the arm's next report
        finally:
            stop(policy, bridge, arm)
    r, report = read(arm_json), json.loads(bridge_json.read_text())
    e2e = report["e2e_ms"]
    out = {
        "mode": mode,
        "e2e_p50_ms": e2e["p50"],
        "e2e_p99_ms": e2e["p99"],
        "cycles": e2e["count"],
        "late_ticks": report["controller"]["late_ticks"],
        "ticks": report["controller"]["ticks"],
        "stale_applied": 0,
    }
    if mode == "forward":
        got = [a[0] for a in r["applied"]]
        nominal_ms = 10.0
    else:
        chunks = [t for t in r["trajectories"] if t[3] > 1]
        got = [t[0] for t in chunks]
        nominal_ms = PERIOD_NS / 1e6
        captured = [t[1] + (t[3] - 1) * PERIOD_NS - START_NS - (H - 1) * PERIOD_NS for t in chunks]
        out.update(
            ros_e2e_p50_ms=pct([(t[0] - c) / 1e6 for t, c in zip(chunks, captured)], 0.5),
            ros_e2e_p99_ms=pct([(t[0] - c) / 1e6 for t, c in zip(chunks, captured)], 0.99),
            transit_p50_ms=pct([(t[0] - t[2]) / 1e6 for t in chunks], 0.5),
            transit_p99_ms=pct([(t[0] - t[2]) / 1e6 for t in chunks], 0.99),
            lead_min_ms=min((t[1] - t[2]) / 1e6 for t in chunks),
            past_due_on_arrival=r["stale_trajectories"],
            points_dropped=report["ros2"]["traj_points_dropped"],
        )
    gaps = intervals_ms(got)
    span_s = (got[-1] - got[0]) / 1e9
    out.update(
        received=len(got),
        rate_hz=(len(got) - 1) / span_s if span_s else 0.0,
        nominal_interval_ms=nominal_ms,
        interval_p50_ms=pct(gaps, 0.5),
        interval_p99_ms=pct(gaps, 0.99),
        interval_max_ms=max(gaps),
        jitter_sd_ms=statistics.pstdev(gaps),
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        say("bench_ros2_modes", "needs root (network namespaces)", error=False)
        return 2
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for mode in MODES if rnd % 2 == 0 else list(MODES)[::-1]:
                res = one_run(mode, a.seconds, Path(tmp))
                res["round"] = rnd
                print(json.dumps(res), flush=True)
                runs.append(res)
    keys = [
        "rate_hz",
        "interval_p50_ms",
        "interval_p99_ms",
        "interval_max_ms",
        "jitter_sd_ms",
        "e2e_p50_ms",
        "e2e_p99_ms",
        "ros_e2e_p50_ms",
        "ros_e2e_p99_ms",
        "transit_p50_ms",
        "transit_p99_ms",
        "lead_min_ms",
        "past_due_on_arrival",
        "late_ticks",
    ]
    print("| figure (median over runs) | " + " | ".join(MODES) + " |")
    print("| --- | " + " | ".join("---" for _ in MODES) + " |")
    for k in keys:
        cells = []
        for mode in MODES:
            xs = [r[k] for r in runs if r["mode"] == mode and k in r]
            cells.append(f"{statistics.median(xs):.2f}" if xs else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
