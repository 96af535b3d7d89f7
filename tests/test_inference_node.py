"""Inference node: observation tokens, sequence layout, latest-only answering, bad input,
budget/commands, and the real process over ipc sockets streaming stamped waypoints.
In-process the node's clock is stepped: a decision in time (a stale observation, a flood's
second, health) comes when the test steps it; a wait for a message is a wait on a socket."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_SPEC, SteppedClock, answered_node, random_obs_body, recv_chunks
from hypothesis import given, settings
from hypothesis import strategies as st

from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.model.obs_tokens import ObsError, ObsTokens
from rtinfer.model.sequence import action_positions, build_prefix, build_sequence, target_positions
from rtinfer.realtime.node_state import State
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

ROOT = Path(__file__).resolve().parents[1]
S = 1_000_000_000


class HeldClock(SteppedClock):
    """A SteppedClock that, once held, stands still between the test's steps: what the node
    counts per second is then exact. The robot stamps its captures on it (one host)."""

    def __init__(self) -> None:
        super().__init__()
        self.held_ns: int | None = None

    def __call__(self) -> int:
        return super().__call__() if self.held_ns is None else self.held_ns

    def hold(self) -> None:
        self.held_ns = self()

    def step(self, ns: int) -> None:
        if self.held_ns is None:
            super().step(ns)
        else:
            self.held_ns += ns


def spin_until(node, cond, what: str, timeout_s: float = 10.0) -> None:
    """Spin `node` until cond() (a message it must hear): a wait on its sockets, not a sleep."""
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, f"the node never {what}"
        node.spin_once(10)


# --- observation tokens and layout ----------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_obj=st.integers(0, 9))
def test_generic_spec_reproduces_the_cells_obs_tokenizer(seed, n_obj):
    cell = pytest.importorskip("examples.conveyor_sorting.obs_tokens")
    cfg = cell.ObsTokenizerConfig()
    if not hasattr(cfg, "spec"):
        pytest.skip("the cell's ObsTokenizerConfig has no spec() yet")
    ref, gen = cell.ObsTokenizer(cfg), ObsTokens(cfg.spec())
    rng = np.random.default_rng(seed)
    objects = np.zeros((max(n_obj, 1), 4), np.float32)
    objects[:n_obj, 0] = rng.integers(0, cfg.num_classes, n_obj)
    objects[:n_obj, 1:3] = rng.uniform(-1.0, 1.0, (n_obj, 2))  # partly outside the limits
    objects[:n_obj, 3] = rng.integers(0, 2, n_obj)
    gantry = rng.uniform(-2, 2, 8).astype(np.float32)
    gantry[6:] = rng.integers(0, 2, 2)
    instruction = rng.permutation(cfg.num_classes).astype(np.int32)
    held = np.float32([rng.integers(-1, cfg.num_classes + 1)])  # incl. none and out of range
    obs = {"objects": objects, "gantry": gantry, "held": held, "instruction": instruction}
    instr, tokens = gen.encode({"values": obs, "ints": {}})
    assert tokens.tolist() == ref.encode(obs).tolist()
    assert instr.tolist() == ref.instruction_tokens(instruction).tolist()


@pytest.mark.parametrize(
    "damage",
    [
        lambda v: v["gantry"].__setitem__(0, np.nan),
        lambda v: v.pop("objects"),
        lambda v: v.__setitem__("gantry", np.zeros(2, np.float32)),
        lambda v: v.__setitem__("instruction", np.array([0, 1, 7], np.int32)),
    ],
)
def test_malformed_observation_raises_obs_error(damage):
    body = random_obs_body(np.random.default_rng(0))
    damage(body["values"])
    with pytest.raises(ObsError):
        ObsTokens(TINY_SPEC).encode(body)


def test_sequence_layout_puts_actions_after_sep():
    from rtinfer.model.vocab import VocabLayout

    v = VocabLayout(3, 16, 32, ("PAD", "BOS", "SEP", "EOS"))
    seq = build_sequence(v, [2, 0, 1], np.arange(11), np.arange(12).reshape(3, 4))
    pos = action_positions(3, 11, 12)
    assert seq[0] == v.special("BOS") and seq[15] == v.special("SEP")
    assert (seq[pos] - v.action_start).tolist() == list(range(12))
    assert (target_positions(3, 11, 12) == pos - 1).all()
    assert len(build_prefix(v, [2, 0, 1], np.arange(11))) == pos[0]


# --- the node in-process ----------------------------------------------------------------------
def make_node_env(model_dir, tmp_path, clock):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "ctl")}
    obs_pub, ctl_pub = Publisher(eps["obs"], "sim"), Publisher(eps["ctl"], "monitor")
    # these tests are not about the deadline: an observation that waits out a stall of a busy
    # host must not turn stale (the node refuses those)
    node = InferenceNode(
        model_dir,
        eps["obs"],
        eps["act"],
        control_endpoint=eps["ctl"],
        cfg=InferenceNodeConfig(health_hz=20.0, deadline_ms=60_000.0),
        clock=clock,
    )
    act = Subscriber(eps["act"], ["action_chunk", "health"])
    rng = np.random.default_rng(0)
    answered_node(node, obs_pub, act, rng)
    return node, obs_pub, ctl_pub, act, rng


@pytest.fixture
def node_env(tiny_model_dir, tmp_path):
    env = make_node_env(tiny_model_dir, tmp_path, SteppedClock())
    yield env
    for s in env[:4]:
        s.close()


def test_node_answers_the_newest_observation_and_counts_skipped(node_env):
    node, obs_pub, _, act, rng = node_env
    skipped0 = node.health()["counters"]["obs_skipped"]
    seqs = [obs_pub._seq + i for i in range(5)]
    for _ in range(5):
        obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    time.sleep(0.3)
    assert node.spin_once(1000)
    chunks = recv_chunks(act, 3)
    assert {c.body["cycle"] for c in chunks} == {seqs[-1]}
    assert {c.body["dest"] for c in chunks} == {"sim"}
    assert node.health()["counters"]["obs_skipped"] - skipped0 == 4
    assert not node.spin_once(50)  # nothing older is answered later


def test_bad_observation_is_counted_and_the_loop_continues(node_env):
    node, obs_pub, _, act, rng = node_env
    body = random_obs_body(rng)
    body["values"]["instruction"] = np.array([5, 5, 5], np.int32)
    obs_pub.publish("obs", body, {"capture": now_ns()})
    assert not node.spin_once(1000)
    assert node.counters["obs_bad"] == 1
    obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    assert node.spin_once(1000) and len(recv_chunks(act, 3)) == 3


def test_budget_message_shortens_the_chunk_and_commands_hold_and_stop(node_env):
    node, obs_pub, ctl_pub, act, rng = node_env
    ctl_pub.publish("budget", {"level": 1, "reason": "slack low"})
    spin_until(node, lambda: node.budget.monitor_level == 1, "heard the budget")
    obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    assert node.spin_once(1000) and node.budget.index >= 1
    chunks = recv_chunks(act, 2)  # the tiny model's horizon is 3; a shorter chunk keeps 2
    assert chunks[0].body["count"] == node.budget.level.chunk == 2
    ctl_pub.publish("command", {"cmd": "safe_hold", "reason": "test"})
    spin_until(node, lambda: node.state == State.HOLD, "heard safe_hold")
    obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    assert not node.spin_once(1000) and node.state == "hold"
    assert node.counters["obs_held"] == 1
    ctl_pub.publish("command", {"cmd": "stop", "reason": "test"})
    spin_until(node, lambda: not node.running, "heard stop")


def test_prefix_cache_hits_while_the_instruction_is_unchanged(node_env):
    node, obs_pub, _, act, rng = node_env
    for _ in range(3):
        body = random_obs_body(rng)
        body["values"]["instruction"] = np.array([1, 2, 0], np.int32)
        obs_pub.publish("obs", body, {"capture": now_ns()})
        assert node.spin_once(1000)
    assert node.policy.runner.counters["prefix_hits"] >= 2


def test_same_host_slack_runs_to_the_chunks_last_waypoint(node_env):
    """The controller rejects any waypoint past the deadline, so the slack the budget acts on
    is the last waypoint's, not waypoint 0's; on one host the stamps compare as they are."""
    node, obs_pub, _, act, rng = node_env
    obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    assert node.spin_once(1000)
    chunk = recv_chunks(act, 64, timeout_s=1.0)  # the whole chunk (its level may have moved)
    assert len(chunk) == chunk[0].body["count"] >= 2
    last = max(chunk, key=lambda e: e.body["index"]).stamps
    assert last["publish"] > chunk[0].stamps["publish"]
    assert node.robot_clock is None and node.intake.trace_sub is None  # ipc: one clock
    assert node.slack_ns == node.budget.deadline_ns - (last["publish"] - last["capture"])
    node.clock.step(node.health_part.period_ns)  # the next health message is due
    node.spin_once(10)
    health = next(e for e in iter(lambda: act.recv(500), None) if e.topic == "health")
    assert health.body["gauges"]["slack_us"] == node.slack_ns / 1e3


def test_a_chunks_recv_first_token_and_publish_stamps_are_on_the_nodes_clock(node_env):
    node, obs_pub, _, act, rng = node_env
    node.clock.step(30 * S)  # the node's clock 30 s ahead of the robot's (deadline 60 s)
    obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    t0 = node.clock()
    assert node.spin_once(1000)
    chunks = recv_chunks(act, 3)
    assert len(chunks) == 3
    for c in chunks:
        st = c.stamps
        assert t0 <= st["obs_recv"] <= st["first_token"] <= st["publish"] <= node.clock()


def test_an_observation_older_than_the_deadline_is_refused_counted_and_not_answered(node_env):
    node, obs_pub, _, act, rng = node_env
    stale0 = node.health()["counters"]["obs_stale"]
    node.clock.step(61 * S)  # the node's now: 61 s after the capture below, deadline 60 s
    obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    spin_until(node, lambda: node.health()["counters"]["obs_stale"] > stale0, "refused it")
    assert node.health()["counters"]["obs_stale"] == stale0 + 1
    assert not node.spin_once(50) and recv_chunks(act, 1, timeout_s=0.2) == []


def test_a_flood_is_counted_when_its_second_ends_on_the_nodes_clock(tiny_model_dir, tmp_path):
    """Over FLOOD_FACTOR times the policy rate (4 x 20 Hz) in one second of the node's clock is
    one flood, counted when the next second starts; the robot is still answered."""
    env = make_node_env(tiny_model_dir, tmp_path, HeldClock())
    node, obs_pub, _, act, rng = env
    node.clock.hold()
    st = {"capture": node.clock()}  # never after an arrival, nor after its publish stamp
    try:
        floods = lambda: node.health()["counters"]["obs_floods"]  # noqa: E731
        taken = lambda: node.health()["counters"]["obs_skipped"] + node.counters["cycles"]  # noqa: E731
        before = taken()
        for _ in range(100):
            obs_pub.publish("obs", random_obs_body(rng), st)
        spin_until(node, lambda: taken() >= before + 100, "took all 100")
        assert floods() == 0  # its second has not ended on the node's clock
        node.clock.step(S)
        obs_pub.publish("obs", random_obs_body(rng), st)
        spin_until(node, lambda: taken() >= before + 101, "took the next second's first")
        assert floods() == 1
        node.clock.step(S)  # a second with one observation: no flood
        obs_pub.publish("obs", random_obs_body(rng), st)
        spin_until(node, lambda: taken() >= before + 102, "took the third second's")
        assert floods() == 1 and node.counters["obs_bad"] == 0
    finally:
        for s in env[:4]:
            s.close()


# --- configuration ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value, says",
    [
        ("health_hz", 0.0, "health_hz is 0.0"),
        ("health_hz", -1.0, "rate > 0"),
        ("deadline_ms", 0.0, "deadline_ms is 0.0"),
        ("threads", 0, "at least 1 thread"),
        ("temperature", 0.0, "temperature > 0"),
        ("drafter", "big", "use one of chunk, self, model, cascade, none"),
        ("name", "", "name is empty"),
    ],
)
def test_a_bad_config_is_refused_when_built_saying_what_and_the_fix(field, value, says):
    with pytest.raises(ValueError, match=says):
        InferenceNodeConfig(**{field: value})


def test_the_cli_refuses_a_bad_config_with_a_usage_error(capsys):
    from rtinfer.inference.node import main

    with pytest.raises(SystemExit) as e:
        main(
            [
                "--model",
                "m",
                "--obs",
                "ipc:///tmp/o",
                "--actions",
                "ipc:///tmp/a",
                "--deadline-ms",
                "0",
            ]
        )
    assert e.value.code == 2 and "deadline_ms is 0.0" in capsys.readouterr().err


# --- the real process -------------------------------------------------------------------------
def test_node_process_streams_stamped_waypoints_over_ipc(tiny_model_dir, tmp_path):
    obs_ep, act_ep = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    obs_pub = Publisher(obs_ep, "sim")
    act = Subscriber(act_ep, ["action_chunk", "heartbeat"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(tiny_model_dir),
            "--obs",
            obs_ep,
            "--actions",
            act_ep,
            "--drafter",
            "self",
            "--trace",
            str(tmp_path / "node.trace"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tok = ActionTokenizer(TokenizerConfig.load(tiny_model_dir / "tokenizer.json"))
    try:
        rng, chunks, end = np.random.default_rng(1), [], time.monotonic() + 60
        while time.monotonic() < end and len(chunks) < 3:
            sent_capture = now_ns()
            obs_pub.publish("obs", random_obs_body(rng), {"capture": sent_capture})
            got = recv_chunks(act, 3, timeout_s=0.5)  # one cycle's three waypoints, or retry
            chunks = got if len({c.body["cycle"] for c in got}) == 1 else []
        assert len(chunks) == 3, proc.stderr.read() if proc.poll() is not None else "no chunks"
        assert [c.body["index"] for c in chunks] == [0, 1, 2]
        for c in chunks:
            s, b = c.stamps, c.body
            assert list(s)[:4] == ["capture", "obs_recv", "first_token", "publish"]
            assert s["capture"] <= s["obs_recv"] <= s["first_token"] <= s["publish"] <= s["recv"]
            assert b["count"] == 3 and b["spec"] == tok.cfg.hash
            assert b["dest"] == "sim"  # the src of the obs it answers
            assert b["period_ns"] == b["start_ns"] == tok.cfg.period_ns
            assert np.array_equal(b["values"], tok.decode(b["tokens"]))
        assert chunks[0].stamps["publish"] <= chunks[1].stamps["publish"]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
        obs_pub.close()
        act.close()
    assert proc.returncode == 0, err
    assert "ready" in out
