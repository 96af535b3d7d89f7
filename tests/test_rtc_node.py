"""Real-time chunking end to end: a robot that commits its plan's prefix with each observation,
the inference node that forces it as the chunk's token prefix and names it in every
waypoint, the robot applying only chunks that join what it executes; an old robot served as
before; a prefix past the policy's maximum refused, a misaligned one served unconditioned.
Real sockets (ipc), the tiny token model, the real clock (the deadline is not under test)."""

import time

import numpy as np
import pytest
from conftest import gantry_control, random_obs_body, recv_chunks

from controllers.hardware import Observation, RobotState
from controllers.node import ControllerConfig, ControllerNode
from controllers.rtc import RtcConfig
from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.committed import committed_body, prefix_hash
from rtinfer.transport.wire import now_ns

MS = 1_000_000
P = 50 * MS  # the tiny model's period and start


class Gantry:
    """A robot that stays put and observes at 20 Hz: the join rules are under test."""

    def __init__(self):
        self.state = RobotState(0, np.array([0.0, 0.0, 0.5]), np.zeros(3))
        self.rng, self.next_ns = np.random.default_rng(1), 0

    def read(self):
        return self.state

    def write(self, cmd):
        pass

    def observe(self, state, now):
        if now < self.next_ns:
            return None
        self.next_ns = now + P
        body = random_obs_body(self.rng)
        return Observation(now, body["values"], body["ints"])


@pytest.fixture
def loop(tiny_model_dir, tmp_path):
    obs_ep, act_ep = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    made = []

    def make(rtc=RtcConfig(margin_ms=60.0)):  # a 60 ms margin: a prefix on a fast loop
        robot_pub = Publisher(obs_ep, "arm")
        node = InferenceNode(
            tiny_model_dir, obs_ep, act_ep, cfg=InferenceNodeConfig(deadline_ms=60_000.0)
        )
        sub = Subscriber(act_ep, ["action_chunk"])
        tok = TokenizerConfig.load(tiny_model_dir / "tokenizer.json")
        cfg = ControllerConfig(
            control=gantry_control(low=(-1.0, -1.0, 0.0), high=(1.0, 1.0, 1.0)),
            tokenizer=tok,
            deadline_ns=60_000 * MS,
            chunk_interval_ns=P,
            rtc=rtc,
        )
        ctl = ControllerNode(Gantry(), cfg, sub, robot_pub, tok.hash)
        made.extend([node, sub, robot_pub])
        return node, ctl

    yield make
    for s in made:
        s.close()


def run_lockstep(node, ctl, cycles: int) -> list:
    """Tick the robot; each observation it sends, the node answers before the robot ticks on
    until the chunk is in (so no answer overtakes another). The chunks' first waypoints."""
    firsts, sent = [], 0
    deadline = time.monotonic() + 60
    while len(firsts) < cycles and time.monotonic() < deadline:
        ctl.tick()
        if ctl.counters["obs_sent"] == sent:
            time.sleep(0.001)
            continue
        sent = ctl.counters["obs_sent"]
        for _ in range(200):  # the slow joiner: a first observation may be lost
            if node.spin_once(20):
                break
            if ctl.counters["obs_sent"] == sent:
                ctl.tick()
        taken = ctl.counters["waypoints_accepted"] + ctl.counters["prefix_mismatch"]
        for _ in range(2000):
            ctl.tick()
            if ctl.counters["waypoints_accepted"] + ctl.counters["prefix_mismatch"] >= taken + 3:
                break
            time.sleep(0.0005)
        firsts.append(dict(ctl.chunk.stamps))
    return firsts


def test_robot_commits_its_prefix_and_applies_the_chunks_conditioned_on_it(loop, tiny_model_dir):
    node, ctl = loop()
    tok = ActionTokenizer(TokenizerConfig.load(tiny_model_dir / "tokenizer.json"))
    plans = {}  # cycle -> its waypoints' tokens, as the robot took them
    orig = ctl._on_waypoint

    def spy(env, now):
        b = env.body
        plans.setdefault(b["cycle"], {})[b["index"]] = (b["tokens"].copy(), b.get("conditioned"))
        orig(env, now)

    ctl._on_waypoint = spy
    run_lockstep(node, ctl, 8)
    c, h = ctl.counters, node.health()["counters"]
    assert c["committed_sent"] >= 4 and c["chunks_conditioned"] >= 4
    assert c["prefix_mismatch"] == 0 and c["rejected_stale"] == 0
    assert h["committed_taken"] == c["committed_sent"]
    for wps in plans.values():
        named = wps[0][1]
        assert all(w[1] == named for w in wps.values())  # every waypoint names it
        if named is None:
            continue
        old = plans[named["chunk"]]
        n, start = named["n"], named["from"]
        for i in range(n):  # the committed waypoints are the chunk's first, token for token
            assert (wps[i][0] == old[start + i][0]).all()
        values = tok.decode(np.stack([old[start + i][0] for i in range(n)]))
        assert named["hash"] == prefix_hash(values)


def test_an_old_robot_that_sends_no_prefix_is_served_as_before(loop):
    node, ctl = loop(rtc=None)
    run_lockstep(node, ctl, 4)
    c, h = ctl.counters, node.health()["counters"]
    assert c["committed_sent"] == 0 and c["chunks_conditioned"] == 0 and c["chunks_accepted"] >= 4
    assert h["committed_taken"] == h["committed_too_long"] == h["committed_bad"] == 0


def test_a_prefix_past_the_policys_maximum_is_refused_and_a_misaligned_one_unconditioned(
    tiny_model_dir, tmp_path, capfd
):
    obs_ep, act_ep = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    pub = Publisher(obs_ep, "arm")
    node = InferenceNode(
        tiny_model_dir, obs_ep, act_ep, cfg=InferenceNodeConfig(deadline_ms=60_000.0)
    )
    act = Subscriber(act_ep, ["action_chunk"])
    tok = ActionTokenizer(TokenizerConfig.load(tiny_model_dir / "tokenizer.json"))
    rng = np.random.default_rng(3)
    try:
        for _ in range(200):  # the slow joiner
            pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
            if node.spin_once(20):
                break
        while act.recv(50) is not None:
            pass

        def answer(n, start_ns_after=P):
            t = now_ns()
            body = {
                **random_obs_body(rng),
                "committed": committed_body(
                    7, 1, tok.decode(np.full((n, 4), 5)), t + start_ns_after
                ),
            }
            pub.publish("obs", body, {"capture": t})
            time.sleep(0.05)
            return node.spin_once(500)

        assert not answer(3)  # the tiny model's horizon is 3: it conditions on at most 2
        assert node.health()["counters"]["committed_too_long"] == 1
        assert "past the 2 this policy can condition on: not answered" in capfd.readouterr().err
        assert answer(1, start_ns_after=2 * P)  # its waypoint 0 is not due then
        chunks = recv_chunks(act, 3)
        assert len(chunks) == 3 and all("conditioned" not in c.body for c in chunks)
        assert node.health()["counters"]["committed_bad"] == 1
        assert answer(2)
        chunks = recv_chunks(act, 3)
        assert [c.body["conditioned"]["n"] for c in chunks] == [2, 2, 2]
        assert [c.body["tokens"].tolist() for c in chunks[:2]] == [[5] * 4] * 2
    finally:
        for s in (node, pub, act):
            s.close()
