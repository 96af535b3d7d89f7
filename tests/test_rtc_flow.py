"""Real-time chunking for a flow policy, through a real InferenceNode over ipc: a step graph
with per-waypoint t conditions on a robot's committed prefix (its chunk names it in
`conditioned` and begins with the committed waypoints, bit for bit); one with a single t
cannot condition, nor one whose spec declares no max_committed: it says so at start-up and
serves the chunk unconditioned."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from conftest import recv_chunks

from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.committed import committed_body, prefix_hash
from rtinfer.transport.wire import now_ns

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from flow_dirs import AFFINE, LADDER, SPEC  # noqa: E402

from models.flow_package import package_flow  # noqa: E402
from models.flow_tiny import TinyFlow, export_looped  # noqa: E402

STATE = {"values": {"state": np.array([0.3, 0.1, -0.2, 0.3], np.float32)}, "ints": {}}
COMMITTED = np.array([[1.25, -3.5], [1.5, -3.25], [1.75, -3.0]], np.float32)


def _serve(
    tmp_path, per_waypoint_t: bool, max_committed: int | None = 4, flow_rtc: str = "condition"
):
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    model = TinyFlow(per_waypoint_t=per_waypoint_t, seed=4)
    graphs = tmp_path / "graphs"
    prefix, step = export_looped(model, graphs)
    package_flow(
        tmp_path / "policy",
        prefix,
        [step],
        LADDER,
        replace(SPEC, max_committed=max_committed),
        affine=AFFINE,
    )
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act")}
    robot = Publisher(eps["obs"], "robot")
    node = InferenceNode(
        tmp_path / "policy",
        eps["obs"],
        eps["act"],
        cfg=InferenceNodeConfig(deadline_ms=60_000.0, seed=3, flow_rtc=flow_rtc),
    )
    act = Subscriber(eps["act"], ["action_chunk"])
    time.sleep(0.3)  # the slow joiner
    return node, robot, act


def _answer(node, robot, act, committed=None) -> list:
    for _ in range(50):  # a first observation may be lost to the slow joiner
        t = now_ns()
        body = dict(STATE)
        if committed is not None:
            body["committed"] = committed_body(11, 2, committed, t + SPEC.start_ns)
        robot.publish("obs", body, {"capture": t})
        if node.spin_once(200):
            return recv_chunks(act, SPEC.horizon, timeout_s=5)
    return []


def test_a_per_waypoint_t_flow_policy_answers_conditioned_with_the_prefix_exactly(tmp_path):
    node, robot, act = _serve(tmp_path, per_waypoint_t=True)
    try:
        assert node.policy.max_committed == 4  # the spec's
        got = _answer(node, robot, act, COMMITTED)
        assert len(got) == SPEC.horizon
        named = {"chunk": 11, "from": 2, "n": 3, "hash": prefix_hash(COMMITTED)}
        assert all(c.body["conditioned"] == named for c in got)
        values = np.stack([c.body["values"] for c in got])
        assert np.array_equal(values[:3], COMMITTED)  # bit for bit
        assert np.isfinite(values).all()
        free = np.stack([c.body["values"] for c in _answer(node, robot, act)])
        assert not np.array_equal(free[:3], COMMITTED)
        assert node.health()["counters"]["committed_taken"] == 1
    finally:
        for s in (node, robot, act):
            s.close()


@pytest.mark.parametrize("per_waypoint_t,max_committed", [(False, 4), (True, None)])
def test_a_flow_policy_that_cannot_condition_says_so_and_serves_unconditioned(
    tmp_path, capfd, per_waypoint_t, max_committed
):
    """A single t, or a per-waypoint t whose spec declares no max_committed (the delay it was
    trained for is unknown)."""
    node, robot, act = _serve(tmp_path, per_waypoint_t, max_committed)
    try:
        assert node.policy.max_committed == 0
        assert "cannot condition a chunk on a robot's committed prefix" in capfd.readouterr().err
        got = _answer(node, robot, act, COMMITTED)
        assert len(got) == SPEC.horizon and all("conditioned" not in c.body for c in got)
        assert node.health()["counters"]["committed_ignored"] == 1
    finally:
        for s in (node, robot, act):
            s.close()


@pytest.mark.parametrize("max_committed,most", [(4, 4), (None, SPEC.horizon - 1)])
def test_with_flow_rtc_guide_a_single_t_flow_policy_conditions_by_guidance(
    tmp_path, max_committed, most
):
    """The node's flow_rtc "guide": RTC guidance toward the committed prefix needs no
    per-waypoint t; up to the declared delay, else the horizon less one."""
    node, robot, act = _serve(tmp_path, False, max_committed, flow_rtc="guide")
    try:
        assert node.policy.max_committed == most
        got = _answer(node, robot, act, COMMITTED)
        assert len(got) == SPEC.horizon
        assert all(c.body["conditioned"]["hash"] == prefix_hash(COMMITTED) for c in got)
        values = np.stack([c.body["values"] for c in got])
        assert np.array_equal(values[:3], COMMITTED) and np.isfinite(values).all()
        assert node.health()["counters"]["committed_taken"] == 1
    finally:
        for s in (node, robot, act):
            s.close()


def test_guide_left_over_bends_toward_the_chunk_the_prefix_comes_from_when_the_node_sent_it():
    from rtinfer.inference.flow_policy import FlowPolicy
    from rtinfer.transport.committed import Committed

    sent = np.arange(16, dtype=np.float32).reshape(8, 2)
    c = Committed(11, 2, sent[2:5].copy(), 0)
    assert np.array_equal(FlowPolicy.left_over((sent, 11), c), sent[2:])  # its rest too
    assert FlowPolicy.left_over((sent, 12), c) is c.values  # another chunk: the prefix alone
    assert FlowPolicy.left_over(None, c) is c.values
