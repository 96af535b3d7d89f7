"""The shared wire vectors (tests/vectors) against the Python reference: they are up to date,
the decoder gives every stated verdict and decoded form, and the reference controller moves
exactly the stated counters. tests/test_cpp_client.py runs the same files through the C++
client, so "same rules, same counters" is checked on both sides."""

import json
import subprocess
import sys
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import yaml

from rtinfer.transport import wire

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "tests" / "vectors"
sys.path.insert(0, str(VECTORS))
import make_vectors  # noqa: E402

MANIFEST = json.loads((VECTORS / "manifest.json").read_text())


def frames_of(entry) -> list[bytes]:
    return [(VECTORS / f).read_bytes() for f in entry["frames"]]


def test_vectors_are_up_to_date():
    r = subprocess.run(
        [sys.executable, str(VECTORS / "make_vectors.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_vectors_cover_every_error_class_and_topic_kind():
    verdicts = {v["verdict"] for v in MANIFEST["decode"]}
    assert verdicts == {
        "ok",
        "OversizeError",
        "MalformedError",
        "VersionError",
        "TopicError",
        "SchemaError",
        "ArrayError",
    }
    kinds = {v["decoded"]["topic"].partition("/")[0] for v in MANIFEST["decode"] if "decoded" in v}
    assert kinds == set(wire.schema.BODIES)


@pytest.mark.parametrize("entry", MANIFEST["decode"], ids=lambda e: e["name"])
def test_python_decoder_gives_the_stated_verdict(entry):
    frames = frames_of(entry)
    kw = {
        "max_bytes": entry.get("max_bytes", wire.DEFAULT_MAX_BYTES),
        "topics": entry.get("topics"),
    }
    if entry["verdict"] == "ok":
        env = wire.decode_frames(frames, **kw)
        if "decoded" in entry:
            assert make_vectors.render_envelope(env) == entry["decoded"]
    else:
        with pytest.raises(wire.WireError) as e:
            wire.decode_frames(frames, **kw)
        assert type(e.value).__name__ == entry["verdict"], e.value


class ListSub:
    """The controller's Subscriber for a replay: hands out the queued envelopes."""

    def __init__(self):
        self.queue = deque()

    def recv(self, timeout_ms=0):
        return self.queue.popleft() if self.queue else None


class RecordingPub:
    src = "arm"

    def __init__(self):
        self.sent = []

    def publish(self, topic, body, stamps=None):
        self.sent.append((topic, body))
        return True


class StillGantry:
    """A robot that stays where it is: the replay checks the chunk rules, not the motion.
    The replay's clock: `now_ns` when the tick starts; a step's apply_ns is the clock once
    read() returns (a read that took that long)."""

    def __init__(self, n):
        from controllers.hardware import RobotState

        self.state = RobotState(0, np.array([0.0, 0.2, 0.5]), np.zeros(n))
        self.now_ns = self.read_until_ns = 0

    def clock(self):
        return self.now_ns

    def read(self):
        if self.read_until_ns is not None:
            self.now_ns = self.read_until_ns
        return self.state

    def write(self, cmd):
        pass


def controller_node(cfg_data):
    from controllers.config import ControlConfig
    from controllers.node import ControllerConfig, ControllerNode
    from rtinfer.model.action_spec import ActionSpec
    from rtinfer.model.action_tokens import TokenizerConfig

    robot = yaml.safe_load((ROOT / "examples/conveyor_sorting/robot.yaml").read_text())
    control = ControlConfig.from_dict(robot["control"])
    cfg = ControllerConfig(
        control=control,
        name=cfg_data["name"],
        tokenizer=TokenizerConfig.load(ROOT / cfg_data["tokenizer"]),
        action=ActionSpec.load(ROOT / cfg_data["action"]),
        deadline_ns=cfg_data["deadline_ns"],
        chunk_interval_ns=cfg_data["chunk_interval_ns"],
        max_period_ns=cfg_data["max_period_ns"],
        open_loop_ms=cfg_data["open_loop_ns"] / 1e6 if "open_loop_ns" in cfg_data else None,
    )
    sub, pub, hw = ListSub(), RecordingPub(), StillGantry(len(control.axes))
    return ControllerNode(hw, cfg, sub, pub, clock=hw.clock, robot=cfg_data["robot"]), sub, pub


@pytest.mark.parametrize("case", MANIFEST["controller"]["cases"], ids=lambda c: c["name"])
def test_python_controller_moves_the_stated_counters(case):
    c = MANIFEST["controller"]
    node, sub, pub = controller_node(c["config"])
    for k, step in enumerate(case["steps"]):
        before = {n: node.counters[n] for n in c["counters"]}
        pub.sent.clear()
        now = step["now_ns"]
        if step["frames"]:
            env = wire.decode_frames(frames_of(step))
            env.stamps["recv"] = now  # as the bus does
            sub.queue.append(env)
        node.hw.now_ns, node.hw.read_until_ns = now, step.get("apply_ns")
        node.tick()
        delta = {n: node.counters[n] - before[n] for n in c["counters"]}
        traces = [b for t, b in pub.sent if t == "trace"]
        trace = (
            "apply"
            if any("apply" in b["stamps"] for b in traces)
            else "late"
            if any("late_index" in b["fields"] for b in traces)
            else None
        )
        assert (delta, node.state, trace) == (step["expect"], step["state"], step["trace"]), (
            f"step {k}"
        )


SYNC = {"obs": {"values": {}, "ints": {}}, "command": {"cmd": "clear", "reason": "sync"}}


@pytest.mark.parametrize("entry", MANIFEST["framing"], ids=lambda e: e["name"])
def test_a_real_subscriber_takes_or_rejects_each_framing_vector_as_stated(entry):
    """Frame 0 and the envelope through a real rtinfer Subscriber (inproc, from a raw PUB):
    `ok` is delivered, `rejected` is counted in `rejected` and not delivered."""
    import zmq

    from rtinfer.transport.bus import Subscriber
    from rtinfer.transport.bus.topics import addressed_topic

    topics, to = entry["topics"], entry.get("to") or {}
    topic_frame, *frames = frames_of(entry)
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"inproc://framing-{entry['name']}")
    sub = Subscriber(f"inproc://framing-{entry['name']}", topics, ctx=ctx, to=to)
    t = topics[0]
    head = addressed_topic(t, to[t]) if t in to else t.encode()
    body = SYNC.get(t) or wire.decode_frames(frames).body  # a chunk to this receiver's robot

    def marker(src: str) -> None:
        pub.send_multipart([head, wire.encode(t, body, seq=0, src=src)])

    try:
        for _ in range(500):  # the slow joiner: until a marker gets through
            marker("sync")
            if sub.recv(10) is not None:
                break
        while sub.recv(50) is not None:
            pass
        before = sub.counters["rejected"]
        pub.send_multipart([topic_frame, *frames])
        marker("after")
        got = [sub.recv(2000), sub.recv(200)]
        got = [e.src for e in got if e is not None]
        if entry["verdict"] == "ok":
            assert got == [wire.decode_frames(frames).src, "after"]
            assert sub.counters["rejected"] == before
        else:
            assert got == ["after"] and sub.counters["rejected"] == before + 1
    finally:
        sub.close()
        pub.close(0)
