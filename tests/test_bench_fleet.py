"""`rtinfer bench fleet` on a tiny configuration, as real processes: the shipped policy, one
and two bench robots, a node for all (batched, and one at a time) and a node each. Chunks are accepted by the robots'
own controller rules and equal plain greedy; a robot over --max-robots is refused and
counted, while one node per robot serves both."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_fleet_bench_counts_accepted_identical_chunks_and_a_refused_robot(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "bench",
            "fleet",
            "--json",
            "--robots",
            "1",
            "2",
            "--seconds",
            "2",
            "--warmup",
            "1",
            "--max-robots",
            "1",
            "--plot",
            str(tmp_path / "fleet.png"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["deadline_ms"] == 100.0 and [r["robots"] for r in result["rows"]] == [1, 2]
    for row in result["rows"]:
        for arrangement in ("batched", "sequential", "separate"):
            r = row[arrangement]
            assert set(r) >= {
                "deadline_met",
                "e2e_p50_ms",
                "e2e_p99_ms",
                "chunks_per_cpu_s",
                "refused",
                "identical",
            }
            assert r["chunks_accepted"] > 0 and r["chunks_per_cpu_s"] > 0
            assert r["identical"] == 1.0 and r["chunks_checked"] == r["chunks_accepted"]
            assert 0 < r["e2e_p50_ms"] <= r["e2e_p99_ms"]
    one, two = result["rows"]
    assert all(one[k]["refused"] == 0 for k in ("batched", "sequential", "separate"))
    # one node for both robots, at most one robot per node: the second is refused
    for k in ("batched", "sequential"):
        assert two[k]["refused"] == 1 and two[k]["robots_answered"] == 1
        assert two[k]["deadline_met_all_robots"] <= 0.5
        assert any("--max-robots" in line for line in two[k]["refusals"])
    # a node per robot: both served
    assert two["separate"]["refused"] == 0 and two["separate"]["robots_answered"] == 2
    assert (tmp_path / "fleet.png").stat().st_size > 0


def test_the_bench_robot_imports_no_inference_package():
    code = (
        "import sys, controllers.bench_robot; "
        "print([m for m in ('torch', 'onnxruntime', 'tensorrt', 'rtinfer.inference') "
        "if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_sigterm_ends_a_bench_robot_s_run_early_with_its_record(tmp_path):
    """The failover bench starts its robots for the longest its phases may take and ends them
    with SIGTERM after the last: the run ends then, and the record is written as at an end."""
    model = ROOT / "models/zoo/conveyor-v1"
    cmd = [sys.executable, "-m", "controllers.bench_robot", "--name", "r0"]
    cmd += ["--obs", f"ipc://{tmp_path}/obs", "--actions", f"ipc://{tmp_path}/act"]
    cmd += ["--model", str(model), "--stream", str(model / "obs_stream.npz")]
    cmd += ["--rate-hz", "20", "--out", str(tmp_path / "r0.npz")]
    p = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        p.stdin.write(
            json.dumps({"start_ns": start, "measure_ns": start, "end_ns": start + 600 * 10**9})
        )
        p.stdin.write("\n")
        p.stdin.close()
        time.sleep(1.0)
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=30) == 0  # not the 600 s it was given
    finally:
        p.kill()
    with np.load(tmp_path / "r0.npz", allow_pickle=False) as z:
        sent = json.loads(str(z["counters"]))["obs_sent"]
    assert 1 <= sent < 20 * 30  # published until the signal, at 20 Hz
