"""The first closed loop across processes: the scripted expert node drives the cell over
ZeroMQ in real time. Starts the expert as its own OS process and runs the robot here.

    python -m examples.conveyor_sorting.realtime_run --seconds 60 [--report out.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from controllers.run import emit_report

from .sim_node import SimNode


def run(seconds: float, *, seed: int = 0, trace: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="rtinfer-") as tmp:
        obs, act = f"ipc://{tmp}/obs", f"ipc://{tmp}/actions"
        sim = SimNode(obs, act, seed=seed, trace_path=trace)
        expert = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "examples.conveyor_sorting.expert_node",
                "--obs",
                obs,
                "--actions",
                act,
            ]
        )
        try:
            time.sleep(1.0)  # the expert connects and subscribes before the clock starts
            report = sim.run(seconds)
        finally:
            expert.terminate()
            expert.wait(timeout=10)
            sim.close()
    m = report["metrics"]
    report["success_rate"] = m["correct"] / m["resolved"] if m.get("resolved") else None
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.realtime_run",
        description="The first closed loop across processes: the scripted expert node (its "
        "own OS process) drives the conveyor cell over ZeroMQ in real time. "
        "Prints the sim's report as JSON.",
    )
    ap.add_argument("--seconds", type=float, default=60.0, help="sim seconds (default 60)")
    ap.add_argument("--seed", type=int, default=0, help="cell seed (default 0)")
    ap.add_argument("--trace", default=None, help="write the controller's trace file here")
    ap.add_argument("--report", default=None, help="also write the report JSON here")
    a = ap.parse_args(argv)
    emit_report(run(a.seconds, seed=a.seed, trace=a.trace), a.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
