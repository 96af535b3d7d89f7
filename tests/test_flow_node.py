"""A flow policy served by a real InferenceNode to a real robot-side subscriber over ipc: the
chunk arrives whole (values only, the action spec's hash), the budget levels are its step
ladder, and a step graph's NaN is dropped and counted as a policy's NaN is, the node serving
on."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import recv_chunks

from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from flow_dirs import SPEC, NanFlow, build  # noqa: E402

from tests.faults.common import wait_for  # noqa: E402


def _obs(x: float) -> dict:
    return {"values": {"state": np.array([x, 0.1, -0.2, 0.3], np.float32)}, "ints": {}}


@pytest.fixture
def served(tmp_path):
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    build(tmp_path / "policy", NanFlow())
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act")}
    robot = Publisher(eps["obs"], "robot")
    node = InferenceNode(
        tmp_path / "policy",
        eps["obs"],
        eps["act"],
        cfg=InferenceNodeConfig(deadline_ms=60_000.0, seed=3),
    )
    act = Subscriber(eps["act"], ["action_chunk"])
    time.sleep(0.3)  # the slow joiner
    yield node, robot, act
    for s in (node, robot, act):
        s.close()


def test_a_flow_chunk_arrives_whole_and_a_step_graphs_nan_is_dropped_and_counted(served):
    node, robot, act = served
    assert [lv.depth for lv in node.budget.levels] == [0, 1, 2, 3]
    assert "flow policy (euler, steps per level 10, 4, 2, 1" in node.policy.summary
    sent = []
    for x in (0.5, 4.0, 4.0, 0.2):  # state[0] > 1: the step graph returns NaN
        sent.append(robot._seq)
        robot.publish("obs", _obs(x), {"capture": now_ns()})
        assert wait_for(lambda: node.spin_once(100), 10)
    got = recv_chunks(act, 2 * SPEC.horizon, timeout_s=5)
    assert [(c.body["cycle"], c.body["index"]) for c in got] == [
        (s, i) for s in (sent[0], sent[3]) for i in range(SPEC.horizon)
    ]
    for c in got:
        assert c.body["spec"] == SPEC.hash and "tokens" not in c.body
        assert np.isfinite(c.body["values"]).all()
        assert (np.abs(c.body["values"]) <= 50.0).all()
    counters = node.health()["counters"]
    assert counters["chunks_not_finite"] == 2 and counters["policy_broken"] == 0
    assert counters["flow_steps"] >= 4 * 10


def test_a_cheaper_level_runs_fewer_steps(served):
    node, robot, act = served
    node.budget.set_monitor_level(3)
    robot.publish("obs", _obs(0.5), {"capture": now_ns()})
    steps0 = node.health()["counters"]["flow_steps"]
    assert wait_for(lambda: node.spin_once(100), 10)
    assert node.health()["counters"]["flow_steps"] - steps0 == 1
    first = recv_chunks(act, SPEC.horizon)
    assert len(first) == SPEC.horizon
