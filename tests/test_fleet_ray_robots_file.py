"""An inference node learns its robots at run time from its robots file (--robots-file,
rtinfer.inference.robots_file): a robot written in is connected to and answered, a robot
taken out is let go at once and answered no more, a file that does not parse keeps the
robots read before. The tiny exported model, real ipc sockets; no Ray."""

import json
import os
import time

import numpy as np
import pytest
from conftest import SteppedClock, random_obs_body

from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
from rtinfer.inference.robots_file import CHECK_EVERY_NS
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns


def write(path, robots: dict) -> None:
    """Atomically, as the fleet's host actor does: write elsewhere, then rename."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(robots, f)
    os.replace(tmp, path)


def answered(node, act, pub, rng, name: str, seconds: float = 5.0) -> bool:
    """Publish as robot `name` every 20 ms until the node sends it a chunk (the slow joiner),
    for up to `seconds` (a node subscribed to nothing returns from spin_once at once)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
        node.spin_once(20)
        time.sleep(0.02)
        env = act.recv(0)
        while env is not None:
            if env.topic == "action_chunk" and env.body["dest"] == name:
                return True
            env = act.recv(0)
    return False


@pytest.fixture
def node_and_robots(tiny_model_dir, tmp_path):
    eps = {n: f"ipc://{tmp_path}/obs-{n}" for n in ("a", "b")}
    pubs = {n: Publisher(eps[n], n) for n in eps}
    robots_file = tmp_path / "robots.json"
    node = InferenceNode(
        tiny_model_dir,
        [],
        f"ipc://{tmp_path}/act",
        cfg=InferenceNodeConfig(deadline_ms=1000.0, health_hz=20.0),
        robots_file=str(robots_file),
        clock=SteppedClock(),
    )
    node.robots.period_ns = 1_000_000_000  # both fit however loaded the machine is
    act = Subscriber(f"ipc://{tmp_path}/act", ["action_chunk"])
    yield node, pubs, act, eps, robots_file
    for s in (node, act, *pubs.values()):
        s.close()


def test_a_robot_written_in_is_served_and_one_taken_out_is_let_go(node_and_robots, capsys):
    node, pubs, act, eps, robots_file = node_and_robots
    rng = np.random.default_rng(0)
    assert not answered(node, act, pubs["a"], rng, "a", 0.3), "served before it was named"
    write(robots_file, {"a": eps["a"]})
    assert answered(node, act, pubs["a"], rng, "a")
    write(robots_file, {"b": eps["b"]})  # a moves away, b moves in
    assert answered(node, act, pubs["b"], rng, "b")
    assert "a" not in node.robots.slots
    assert node.health()["counters"]["robots_released"] == 1
    assert not answered(node, act, pubs["a"], rng, "a", 0.5), "a served after it left"
    assert "robots file" in capsys.readouterr().err


def test_a_file_that_does_not_parse_keeps_the_robots_read_before(node_and_robots, capsys):
    node, pubs, act, eps, robots_file = node_and_robots
    rng = np.random.default_rng(1)
    write(robots_file, {"a": eps["a"]})
    assert answered(node, act, pubs["a"], rng, "a")
    robots_file.write_text("{half a file")
    node.clock.step(CHECK_EVERY_NS)  # past the file's check interval
    assert answered(node, act, pubs["a"], rng, "a")
    err = capsys.readouterr().err
    assert err.count("not read") == 1 and "replaced atomically" in err
