"""One inference node, several robots (issue 19, the part without batched graphs): each
robot's chunks equal its own plain greedy decode, one robot's bad observation or restart
does not disturb another, the robot whose chunk is due first goes first, a robot beyond the
measured capacity is refused and said so, a silent robot leaves. The tiny exported model,
real ipc sockets, one publisher per robot."""

import re
import time

import numpy as np
import pytest
from conftest import SteppedClock, random_obs_body, recv_chunks

from rtinfer.inference import robots as robots_module
from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
from rtinfer.inference.robots import UTILISATION
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

MS = 1_000_000


@pytest.fixture
def fleet(tiny_model_dir, tmp_path):
    """(node, {robot: its obs publisher}, the action subscriber, rng, {robot: endpoint}):
    robots a, b, c publishing; d's endpoint is connected but nobody binds it yet."""
    names = ("a", "b", "c")
    eps = {n: f"ipc://{tmp_path}/obs-{n}" for n in (*names, "d")}
    pubs = {n: Publisher(eps[n], n) for n in names}
    node = InferenceNode(
        tiny_model_dir,
        list(eps.values()),
        f"ipc://{tmp_path}/act",
        cfg=InferenceNodeConfig(health_hz=20.0, deadline_ms=1000.0, drafter="chunk"),
        clock=SteppedClock(),
    )
    act = Subscriber(f"ipc://{tmp_path}/act", ["action_chunk"])
    rng = np.random.default_rng(0)
    # plan admission over a 1 s window: three robots fit however loaded the test machine
    # is (the refusal test narrows it again)
    node.robots.period_ns = 1_000_000_000
    for n in names:  # the slow joiner: until each robot is heard (and answered) once
        for _ in range(200):
            pubs[n].publish("obs", random_obs_body(rng), {"capture": now_ns()})
            if node.spin_once(20):
                break
        else:
            pytest.fail(f"robot {n} never heard")
    time.sleep(0.1)
    while act.recv(50) is not None:
        pass
    yield node, pubs, act, rng, eps
    for s in (node, act, *pubs.values()):
        s.close()


def greedy(node, body) -> np.ndarray:
    """The tokens a plain greedy decode gives for this observation, in a runner of its own."""
    from rtinfer.inference.runner import TokenRunner

    plain = TokenRunner(node.policy.model, drafter="none", backend_opts={"threads": 1})
    level = node.budget.levels[0]
    instr, obs = node.policy.model.obs.encode(body)
    bins, _ = plain.run(instr, obs, None, level)
    return bins.reshape(-1, node.policy.model.tokenizer.dim)


def tokens_by_robot(chunks) -> dict:
    out = {}
    for c in sorted(chunks, key=lambda c: c.body["index"]):
        out.setdefault(c.body["dest"], []).append(c.body["tokens"])
    return {k: np.array(v) for k, v in out.items()}


def test_each_robots_chunks_are_its_own_plain_greedy_decode(fleet):
    node, pubs, act, rng, eps = fleet
    H = node.budget.levels[0].chunk
    for _ in range(3):  # the chunk-reuse drafter drafts each robot from its own last chunk
        bodies = {n: random_obs_body(rng) for n in pubs}
        for n, p in pubs.items():
            p.publish("obs", bodies[n], {"capture": now_ns()})
        time.sleep(0.1)
        for _ in pubs:
            assert node.spin_once(1000)
        got = tokens_by_robot(recv_chunks(act, H * len(pubs)))
        assert set(got) == set(pubs)
        for n in pubs:
            assert np.array_equal(got[n], greedy(node, bodies[n])), n
    h = node.health()["counters"]
    assert h["robots"] == 3 and h["robot.a.cycles"] == h["robot.b.cycles"] == 4


def test_a_bad_observation_or_a_restart_of_one_robot_leaves_the_others_alone(fleet):
    node, pubs, act, rng, eps = fleet
    bad = random_obs_body(rng)
    bad["values"]["instruction"] = np.array([5, 5, 5], np.int32)
    pubs["a"].publish("obs", bad, {"capture": now_ns()})
    pubs["b"].publish("obs", random_obs_body(rng), {"capture": now_ns()})
    time.sleep(0.1)
    answered = [node.spin_once(1000) for _ in range(2)]
    assert sorted(answered) == [False, True]
    a, b = node.robots.slots["a"], node.robots.slots["b"]
    assert a.counters["obs_bad"] == 1 and b.counters["obs_bad"] == 0
    assert {c.body["dest"] for c in recv_chunks(act, 3)} == {"b"}
    for _ in range(30):  # robot a has been up a while (its seq is past a restart's first)
        pubs["a"].publish("obs", random_obs_body(rng), {"capture": now_ns()})
        node.spin_once(20)
    assert a.last_seq > 25
    # robot a restarts: a new publisher, its seq from the start again
    pubs["a"].close()
    time.sleep(0.2)
    pubs["a"] = Publisher(eps["a"], "a")
    for _ in range(200):
        pubs["a"].publish("obs", random_obs_body(rng), {"capture": now_ns()})
        if node.spin_once(20):
            break
    assert a.counters["restarts"] == 1 and a.previous is not None
    assert b.counters["restarts"] == 0 and b.counters["cycles"] >= 2


def test_the_robot_whose_chunk_is_due_first_is_answered_first(fleet):
    node, pubs, act, rng, eps = fleet
    now = now_ns()
    for n, age_ms in (("a", 10), ("b", 20), ("c", 30)):
        pubs[n].publish("obs", random_obs_body(rng), {"capture": now - age_ms * MS})
    time.sleep(0.2)
    order = []
    for _ in pubs:
        assert node.spin_once(1000)
        order.append(recv_chunks(act, 1)[0].body["dest"])
        while act.recv(20) is not None:
            pass
    assert order == ["c", "b", "a"]


def test_a_robot_beyond_the_measured_capacity_is_refused_once_and_counted(fleet, capfd):
    node, pubs, act, rng, eps = fleet
    r = node.robots
    assert r.cycle_ns and r.capacity(node.budget.deadline_ns) >= 3
    # the same measured costs, planned over a window that holds 3 robots' worst case and no more
    r.period_ns = int((r.worst_ns(3) + r.worst_ns(4)) / 2 / UTILISATION)
    assert node.robots.capacity(node.budget.deadline_ns) == 3
    late = Publisher(eps["d"], "d")
    try:
        for _ in range(100):
            late.publish("obs", random_obs_body(rng), {"capture": now_ns()})
            node.spin_once(20)
            if node.robots.counters["obs_refused"] >= 3:
                break
        h = node.health()["counters"]
        assert h["robots_refused"] == 1 and h["obs_refused"] >= 3 and h["robots"] == 3
        assert "d" not in node.robots.slots and h["robot.d.refused"] == 1
        err = capfd.readouterr().err
        assert len(re.findall(r"robot 'd' refused: 4 robots at [\d.]+ Hz need [\d.]+ ms", err)) == 1
        assert "this node fits 3: serve it from another node" in err
        assert all(c.body["dest"] != "d" for c in recv_chunks(act, 50, timeout_s=0.5))
        # the load falls (here: the window widens again): checked after RETRY_NS, admitted
        node.robots.period_ns = 1_000_000_000
        end = time.monotonic() + 3 * robots_module.RETRY_NS / 1e9
        while "d" not in node.robots.slots and time.monotonic() < end:
            late.publish("obs", random_obs_body(rng), {"capture": now_ns()})
            node.spin_once(20)
        assert "d" in node.robots.slots
        h = node.health()["counters"]
        assert h["robots_admitted_late"] == 1 and "robot.d.refused" not in h
        assert "robot 'd' admitted: the load has fallen" in capfd.readouterr().err
    finally:
        late.close()


def test_a_silent_robot_leaves_and_frees_its_slot(fleet):
    node, pubs, act, rng, eps = fleet
    pubs["a"].publish("obs", random_obs_body(rng), {"capture": now_ns()})
    node.spin_once(50)  # a is heard now: only b and c have been silent (since the fixture)
    node.robots.leave_after_ns = 200 * MS
    node.clock.step(250 * MS)  # b and c silent past it; health (which lets them go) due
    a = node.robots.slots["a"]
    for _ in range(100):  # a heard after the step
        pubs["a"].publish("obs", random_obs_body(rng), {"capture": now_ns()})
        node._take_observations(50)
        if a.waiting is not None:
            break
    node.spin_once(50)
    assert set(node.robots.slots) == {"a"}
    assert node.health()["counters"]["robots_left"] == 2


def test_with_address_chunks_a_robot_subscribed_to_its_address_gets_only_its_own(fleet, tmp_path):
    node, pubs, act, rng, eps = fleet
    node.out.address = True  # as cfg.address_chunks=True would
    H = node.budget.levels[0].chunk
    mine = Subscriber(f"ipc://{tmp_path}/act", ["action_chunk"], to={"action_chunk": "a"})
    try:
        for _ in range(200):  # the slow joiner
            pubs["a"].publish("obs", random_obs_body(rng), {"capture": now_ns()})
            if node.spin_once(50) and mine.recv(100) is not None:
                break
        time.sleep(0.1)
        while mine.recv(50) is not None or act.recv(0) is not None:
            pass
        for _n, p in pubs.items():
            p.publish("obs", random_obs_body(rng), {"capture": now_ns()})
        time.sleep(0.1)
        for _ in pubs:
            assert node.spin_once(1000)
        everyone = recv_chunks(act, H * len(pubs))  # unaddressed: takes both forms
        own = recv_chunks(mine, H * len(pubs), timeout_s=1.0)
        assert sorted({c.body["dest"] for c in everyone}) == ["a", "b", "c"]
        assert len(everyone) == H * len(pubs) and len(own) == H
        assert {c.body["dest"] for c in own} == {"a"} and mine.counters["rejected"] == 0
    finally:
        mine.close()


def test_robots_that_join_together_are_admitted_on_a_profile_of_the_cycle(tiny_model_dir, tmp_path):
    eps = [f"ipc://{tmp_path}/obs-{n}" for n in "ab"]
    pubs = [Publisher(e, n) for e, n in zip(eps, "ab")]
    node = InferenceNode(
        tiny_model_dir, eps, f"ipc://{tmp_path}/act", cfg=InferenceNodeConfig(deadline_ms=1000.0)
    )
    rng = np.random.default_rng(1)
    try:
        time.sleep(0.3)  # both robots connected before anything is answered
        for _ in range(100):
            for p in pubs:
                p.publish("obs", random_obs_body(rng), {"capture": now_ns()})
            time.sleep(0.02)
            node._take_observations(0)
            if len(node.robots.slots) == 2:
                break
        assert node.counters["cycles"] == 0 and len(node.robots.slots) == 2
        assert node.robots.cost.count == 5 and node.robots.cycle_ns > 0
    finally:
        for s in (node, *pubs):
            s.close()


def test_a_robot_its_robots_file_places_here_is_admitted_beyond_capacity(fleet, capfd):
    """Placed here by its robots file (a fleet placed it within the capacity declared),
    a robot beyond the measured capacity is admitted, not refused: the node degrades, and
    its capacity (below its load) is what the fleet relieves it by."""
    node, pubs, act, rng, eps = fleet
    r = node.robots
    r.period_ns = int((r.worst_ns(3) + r.worst_ns(4)) / 2 / UTILISATION)
    assert r.capacity(node.budget.deadline_ns) == 3
    r.admission.placed = frozenset({"a", "b", "c", "d"})
    late = Publisher(eps["d"], "d")
    try:
        end = time.monotonic() + 10
        while "d" not in r.slots and time.monotonic() < end:
            late.publish("obs", random_obs_body(rng), {"capture": now_ns()})
            node.spin_once(20)
        assert "d" in r.slots
        h = node.health()["counters"]
        assert h["robots_refused"] == 0 and h["obs_refused"] == 0 and h["robots"] == 4
        assert "refused" not in capfd.readouterr().err
    finally:
        late.close()
