"""Overload, the robot's side, with real processes: an inference node serving a two-level policy
whose full level cannot keep up with its robots (5 robots at a period P of 3 cycles c: about
twice what the node can serve at full quality), so it serves them at its cheaper level, the
load's. Four robots take asks (`--open-loop-ms`), one does not. The four get chunks with an
executed horizon and follow them, never applying one past it (every applied cycle's capture ->
apply is within the deadline or its window); the old robot gets chunks without the new fields,
the old layout, and is served as before. The rates are set from c as timed here, so the verdicts
do not depend on this machine's speed (a busier one makes the full level dearer still).

Why no observation period is asked here: the node admits a robot by the cost it measures (a
second robot joining before any cycle is timed has its own timed first), so with steady costs
the admitted robots always fit the cheapest level; a period is asked only when the costs rise
after admission (a CPU-bound neighbour). That is replayed in tests/test_overload_replay.py, and
the robot honouring it over real sockets in tests/test_pace.py."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from paced_robot import mlp_policy

from controllers.simulated import uniform_robot
from rtinfer.realtime.trace import read_trace
from rtinfer.transport.bus import Subscriber

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
SECONDS = 6.0


def _package(out: Path, control, period_ms: int, horizon: int) -> Path:
    from models.chunk_package import package_module

    spec = control.action_spec(horizon, period_ms * 1_000_000, 0)
    package_module(
        [mlp_policy(control.n, horizon), mlp_policy(control.n, horizon, 16, 1)],
        {"q": np.zeros(control.n, np.float32)},
        out,
        spec,
    )
    return out


def _cycle_ms(model: Path) -> float:
    """The full level's median cycle on this machine, one thread (as the node runs it)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    s = ort.InferenceSession(str(model / "chunk_l0.onnx"), opts)
    feed = {s.get_inputs()[0].name: np.zeros((1, 2), np.float32)}
    for _ in range(10):  # warm up
        s.run(None, feed)
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        s.run(None, feed)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


@pytest.mark.slow
def test_robots_follow_an_executed_horizon_and_an_old_robot_is_served_as_before(tmp_path):
    control = uniform_robot(2, "effort")
    cfg = tmp_path / "arm.yaml"
    cfg.write_text(yaml.safe_dump({"name": "arm", "control": control.to_dict()}))
    c_ms = _cycle_ms(_package(tmp_path / "timing", control, 20, 24))
    period = max(5, int(np.ceil(3 * c_ms)))  # 5 robots: 5 c / (0.8 P) = 2x at full quality
    # a deadline a busy host's queues do not eat, and chunks that last twice that
    deadline = max(6 * period, 800)
    horizon = 2 * deadline // period + 2
    model = _package(tmp_path / "policy", control, period, horizon)
    robots = {"old": False, "new0": True, "new1": True, "new2": True, "new3": True}
    procs = {}
    for name, asks in robots.items():
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controllers.run",
                "--hardware",
                "paced_robot:ObservingAxes",
                "--config",
                str(cfg),
                "--model",
                str(model),
                "--robot",
                name,
                "--obs",
                f"ipc://{tmp_path}/obs_{name}",
                "--actions",
                f"ipc://{tmp_path}/act",
                "--deadline-ms",
                str(deadline),
                "--policy-hz",
                str(1000 / period),
                "--set",
                f"every={period}",
                "--set",
                f"ready_file={tmp_path / ('ready_' + name)}",
                "--seconds",
                "120",
                "--report",
                str(tmp_path / f"{name}.json"),
                "--trace",
                str(tmp_path / f"{name}.tr"),
                *(["--open-loop-ms", str((horizon - 1) * period)] if asks else []),
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
    chunks = Subscriber(f"ipc://{tmp_path}/act", ["action_chunk"])
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(model),
            "--obs",
            *[f"ipc://{tmp_path}/obs_{n}" for n in robots],
            "--actions",
            f"ipc://{tmp_path}/act",
            "--deadline-ms",
            str(deadline),
            "--threads",
            "1",
            "--name",
            "policy",
            "--seconds",
            "120",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    keys: dict[str, set] = {n: set() for n in robots}
    try:
        node.stdout.readline()  # its start-up line: loaded, its sockets open
        end = time.monotonic() + 60
        while not all((tmp_path / f"ready_{n}").exists() for n in robots):  # their loops run
            assert time.monotonic() < end, "the robots did not start"
            time.sleep(0.1)
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            env = chunks.recv(timeout_ms=100)
            if env is not None and env.body["dest"] in keys:
                keys[env.body["dest"]].update(env.body)
        for p in procs.values():  # a robot stopped by SIGTERM writes its report
            p.terminate()
        for p in procs.values():
            p.wait(timeout=30)
    finally:
        chunks.close()
        node.terminate()
        node_err = node.communicate(timeout=30)[1]
        for p in procs.values():
            p.kill()
    reports = {n: json.loads((tmp_path / f"{n}.json").read_text())["controller"] for n in robots}
    why = f"cycle {c_ms:.1f} ms, period {period} ms; {reports}; node: {node_err[:3000]}"
    for name, asks in robots.items():
        c = reports[name]
        assert c["chunks_accepted"] > 0, why  # every robot is served, the old one too
        applied = [r for r in read_trace(tmp_path / f"{name}.tr") if "apply" in r["stamps"]]
        assert applied, why
        for r in applied:  # nothing stale applied: within the deadline or the window
            e2e_ms = (r["stamps"]["apply"] - r["stamps"]["capture"]) / 1e6
            assert e2e_ms <= max(deadline, r["fields"].get("window_ms", 0)), (name, r, why)
        if asks:
            assert c["chunks_executes"] > 0 and "executes" in keys[name], (name, keys[name], why)
        else:
            assert c["obs_slowed"] == 0 and c["chunks_executes"] == 0, why
            assert keys["old"] and not keys["old"] & {"executes", "obs_period_ns"}, why
