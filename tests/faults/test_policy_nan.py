"""A policy that outputs NaN (issue 29): its chunk is dropped before it is sent, counted and
said, the node keeps serving every robot, and a policy that does it on every cycle is
reported as broken, still taking no robot down with it.

A real node process over ipc sockets serves a tiny continuous-chunk policy packaged here:
its chunk is sqrt(gantry[0]) in every value, so robot "sick" (gantry[0] < 0) gets NaN and
robot "well" (gantry[0] > 0) a finite chunk, from the same policy in the same node.
"""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import pytest

from rtinfer.model.action_spec import ActionSpec
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns
from tests.faults.common import PY, ROOT, wait_for

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

SPEC = ActionSpec(
    ("x", "y"),
    ("m", "m"),
    (-10.0, -10.0),
    (10.0, 10.0),
    horizon=3,
    period_ns=50_000_000,
    start_ns=0,
)
ROUNDS = 12
BROKEN_AFTER = 10  # rtinfer.inference.node.BROKEN_AFTER


class SqrtChunk(torch.nn.Module):
    def forward(self, gantry):
        return torch.sqrt(gantry[:, :1]).expand(1, 6).reshape(1, 3, 2)  # NaN where < 0


def _obs(x: float) -> dict:
    return {"values": {"gantry": np.array([x, 0.0], np.float32)}, "ints": {}}


@pytest.fixture(scope="module")
def sqrt_policy(tmp_path_factory):
    from models.chunk_package import package_module

    out = tmp_path_factory.mktemp("nan") / "policy"
    package_module(SqrtChunk(), _obs(1.0)["values"], out, SPEC)
    return out


def _chunks(act, want: dict, timeout_s: float = 20.0) -> dict:
    """action_chunk waypoints by dest until `want` (dest -> waypoints) arrived or timeout;
    the newest health body as "health"."""
    got, end = {"health": None}, time.monotonic() + timeout_s
    while time.monotonic() < end and (
        not want or any(len(got.get(d, [])) < n for d, n in want.items())
    ):
        env = act.recv(100)
        if env is None:
            continue
        if env.topic == "health":
            got["health"] = env.body
        else:
            got.setdefault(env.body["dest"], []).append(env.body)
    return got


def test_a_nan_chunk_is_dropped_and_the_node_serves_the_other_robot_on(sqrt_policy, tmp_path):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("sick", "well", "act")}
    sick, well = Publisher(eps["sick"], "sick"), Publisher(eps["well"], "well")
    act = Subscriber(eps["act"], ["action_chunk", "health"])
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(sqrt_policy),
            "--obs",
            eps["sick"],
            eps["well"],
            "--actions",
            eps["act"],
            "--name",
            "policy",
            "--seconds",
            "120",
            "--deadline-ms",
            "2000",
        ],  # not a deadline test: a busy machine's wait is no loss
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert "ready" in proc.stdout.readline()
        # both robots connected and answered once (the slow joiner)
        assert wait_for(
            lambda: (
                sick.publish("obs", _obs(-1.0), {"capture": now_ns()}),
                well.publish("obs", _obs(4.0), {"capture": now_ns()}),
                _chunks(act, {"well": 3}, 0.3).get("well"),
            )[-1],
            60,
        ), proc.stderr.read() if proc.poll() is not None else "never answered"
        time.sleep(0.3)
        while act.recv(50) is not None:
            pass
        # every round: the sick robot's NaN chunk, then the well robot's chunk
        received, sick_chunks = 0, 0
        for _ in range(ROUNDS):
            sick.publish("obs", _obs(-1.0), {"capture": now_ns()})
            seq = well._seq
            well.publish("obs", _obs(4.0), {"capture": now_ns()})
            got = _chunks(act, {"well": 3})
            sick_chunks += len(got.get("sick", []))
            mine = [b for b in got.get("well", []) if b["cycle"] == seq]
            received += len(mine) == 3 and all(np.allclose(b["values"], 2.0) for b in mine)
        assert proc.poll() is None, proc.stderr.read()
        assert (received, sick_chunks) == (ROUNDS, 0)  # nothing lost, nothing NaN sent
        # a policy whose every chunk is NaN is reported broken, and still serves the well one
        health = None
        for _ in range(300):
            sick.publish("obs", _obs(-1.0), {"capture": now_ns()})
            health = _chunks(act, {}, 0.05)["health"] or health
            if health is not None and health["counters"]["policy_broken"]:
                break
        assert health["counters"]["policy_broken"] == 1
        assert health["counters"]["chunks_not_finite"] >= ROUNDS + BROKEN_AFTER
        assert health["counters"]["robot.well.cycles"] >= ROUNDS
        seq = well._seq
        well.publish("obs", _obs(9.0), {"capture": now_ns()})
        got = _chunks(act, {"well": 3})
        assert [b["index"] for b in got["well"] if b["cycle"] == seq] == [0, 1, 2]
        assert not got.get("sick")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        for s in (sick, well, act):
            s.close()
    assert proc.returncode == 0 and "Traceback" not in err, err
    lines = err.splitlines()
    assert any("has NaN or inf values: not sent, the robot holds" in ln for ln in lines), err
    assert any("the policy is broken" in ln for ln in lines), err
    # rate-limited: at most one line a second, not one per chunk
    said = sum("not sent, the robot holds" in ln for ln in lines)
    assert said <= time.monotonic() - t0 + 1, err


class LastWaypointNaN(torch.nn.Module):
    def forward(self, gantry):  # waypoints 0 and 1 finite, waypoint 2 NaN where gantry[0] < 0
        ones = torch.ones(1, 4) + 0.0 * gantry[:, :1]
        return torch.cat([ones, torch.sqrt(gantry[:, :1]).expand(1, 2)], 1).reshape(1, 3, 2)


def test_a_chunk_with_one_nan_waypoint_is_dropped_whole_before_any_is_sent(tmp_path):
    from models.chunk_package import package_module
    from rtinfer.inference.node import InferenceNode

    package_module(LastWaypointNaN(), _obs(1.0)["values"], tmp_path / "policy", SPEC)
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act")}
    robot = Publisher(eps["obs"], "robot")
    node = InferenceNode(tmp_path / "policy", eps["obs"], eps["act"])
    act = Subscriber(eps["act"], ["action_chunk"])
    try:
        time.sleep(0.3)  # the slow joiner
        sent = []
        for x in (4.0, -1.0, -1.0, 9.0):
            sent.append(robot._seq)
            robot.publish("obs", _obs(x), {"capture": now_ns()})
            assert wait_for(lambda: node.spin_once(100), 10)
        got = _chunks(act, {"robot": 6}, 5)["robot"]
        assert [(b["cycle"], b["index"]) for b in got] == [
            (s, i) for s in (sent[0], sent[3]) for i in range(3)
        ]
        assert node.health()["counters"]["chunks_not_finite"] == 2
        assert node.health()["counters"]["policy_broken"] == 0
    finally:
        for s in (node, robot, act):
            s.close()
