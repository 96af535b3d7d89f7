"""ControllerNode over real inproc bus sockets, driving a pure-numpy double-integrator plant.

The node runs on the test's clock (given at construction), so every timing decision is
deterministic; the messages themselves travel through real zmq sockets.
"""

import contextlib
import re
import time
import types

import numpy as np
import pytest
import zmq
from conftest import gantry_control

from controllers.hardware import Command, RobotState
from controllers.node import ControllerConfig, ControllerNode
from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

MS = 1_000_000
TOK = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0))
ACT = ActionSpec.from_tokenizer(TOK, ("m", "m", "m", "1"))  # the robot's own action spec
MASS = 2.0


class Plant:
    """Three unit-free point masses of MASS kg: the robot, not the thing under test."""

    def __init__(self, pos=(0.0, 0.0, 0.2)):
        self.state = RobotState(0, np.array(pos, float), np.zeros(3))
        self.force = np.zeros(3)

    def read(self) -> RobotState:
        return self.state

    def write(self, cmd: Command) -> None:
        self.force[:], self.state.tool = cmd.value, cmd.tool

    def step(self, dt_ns: int) -> None:
        self.state.vel += self.force / MASS * dt_ns * 1e-9
        self.state.pos += self.state.vel * dt_ns * 1e-9
        self.state.t_ns += dt_ns


def _sync(pub, sub, topic, body):
    """Wait until `sub` hears `pub` (PUB/SUB subscriptions propagate asynchronously)."""
    for _ in range(500):
        pub.publish(topic, body)
        if sub.recv(timeout_ms=10) is not None:
            break
    else:
        raise AssertionError("subscriber never connected")
    while sub.recv(timeout_ms=20) is not None:
        pass


class Cell:
    def __init__(self, ctx, action=ACT, plant=None, obs_spec=None, **node_kw):
        self.policy = Publisher("inproc://chunks", "policy", ctx=ctx)
        self.other = Publisher("inproc://chunks2", "other", ctx=ctx)  # a second node (a fleet)
        self.monitor = Publisher("inproc://cmd", "monitor", ctx=ctx)
        self.sub = Subscriber(
            ["inproc://chunks", "inproc://chunks2", "inproc://cmd"],
            ["action_chunk", "command"],
            ctx=ctx,
        )
        self.pub = Publisher("inproc://ctl", "controller", ctx=ctx)
        self.watch = Subscriber("inproc://ctl", ["health", "trace"], ctx=ctx)
        noop = {"cmd": "clear", "reason": "sync"}
        _sync(self.policy, self.sub, "command", noop)
        _sync(self.other, self.sub, "command", noop)
        _sync(self.monitor, self.sub, "command", noop)
        _sync(
            self.pub,
            self.watch,
            "health",
            {"node": "sync", "state": "sync", "counters": {}, "gauges": {}},
        )
        self.plant = Plant() if plant is None else plant
        cfg = ControllerConfig(
            tokenizer=TOK,
            action=action,
            obs=obs_spec,
            control=gantry_control(mass=(MASS,) * 3, hold_decel=(2.0, 2.0, 2.0)),
        )
        self.t = now_ns()  # the loop's clock, starting at the real one
        node_kw.setdefault("clock", lambda: self.t)
        self.node = ControllerNode(self.plant, cfg, self.sub, self.pub, TOK.hash, **node_kw)
        self.tok = ActionTokenizer(TOK)
        self.cycle = 0

    def seen(self) -> int:
        c = self.node.counters
        return (
            c["waypoints_accepted"]
            + c["commands"]
            + c["chunks_other_source"]
            + sum(v for k, v in c.items() if k.startswith("rejected_"))
        )

    def deliver(self, n: int) -> None:
        """Tick at the current time until the node has taken n more messages."""
        want = self.seen() + n
        for _ in range(2000):
            self.node.tick()
            if self.seen() >= want:
                assert self.seen() == want
                return
            time.sleep(0.001)
        raise AssertionError(f"node saw {self.seen()} of {want} messages")

    def send_chunk(
        self,
        points,
        *,
        age_ms=10,
        suction=0.0,
        spec=None,
        tokens=None,
        indices=None,
        cycle=None,
        dest=None,
        start_ns=50 * MS,
        continuous=False,
        via=None,
    ):
        """Publish a chunk, one waypoint per message, captured age_ms before now, for this
        robot (dest: its pub's src) unless `dest` says otherwise. An action-token chunk
        (spec: the tokenizer hash) by default; continuous=True: no tokens, the values are
        the waypoints themselves and spec is the robot's action spec hash."""
        if cycle is None:
            self.cycle += 1
        w = np.zeros((len(points), 4))
        w[:, :3], w[:, 3] = points, suction
        if continuous:
            toks, vals = None, w.astype(np.float32)
        else:
            toks = self.tok.encode(w) if tokens is None else np.asarray(tokens)
            vals = self.tok.decode(np.clip(toks, 0, TOK.bins - 1))
        for i in range(len(points)) if indices is None else indices:
            (via or self.policy).publish(
                "action_chunk",
                waypoint_body(
                    self.cycle if cycle is None else cycle,
                    i,
                    len(points),
                    vals[i],
                    spec=spec or (ACT.hash if continuous else TOK.hash),
                    period_ns=50 * MS,
                    start_ns=start_ns,
                    dest=self.node.robot if dest is None else dest,
                    tokens=None if toks is None else toks[i],
                ),
                stamps={"capture": self.t - age_ms * MS},
            )
        return vals if continuous else self.tok.decode(self.tok.encode(w))

    def command(self, cmd):
        self.monitor.publish("command", {"cmd": cmd, "reason": "test"})
        self.deliver(1)

    def run(self, ms, log=None):
        for _ in range(ms):
            self.t += MS
            self.node.tick()
            self.plant.step(MS)
            if log is not None:
                log.append(
                    (
                        self.node.stack.tracker.vel.copy(),
                        self.plant.state.vel.copy(),
                        self.node.state,
                    )
                )

    def close(self):
        for s in (self.policy, self.other, self.monitor, self.sub, self.pub, self.watch):
            s.close()


@contextlib.contextmanager
def open_cell(**node_kw):
    """A Cell in a context of its own, closed after use."""
    ctx = zmq.Context()
    c = Cell(ctx, **node_kw)
    try:
        yield c
    finally:
        c.close()
        ctx.term()


@pytest.fixture
def cell():
    with open_cell() as c:
        yield c


LINE = [[0.02, 0.0, 0.2], [0.04, 0.01, 0.2], [0.06, 0.02, 0.2], [0.08, 0.03, 0.2]]


def test_fresh_chunk_is_applied_tracked_and_traced(cell):
    sent = cell.send_chunk(LINE, age_ms=10, suction=1.0)
    cell.deliver(4)
    c = cell.node.counters
    assert c["chunks_accepted"] == 1 and c["waypoints_accepted"] == 4 and cell.node.state == "run"
    cell.run(50)
    for _ in range(15):  # a 20 Hz policy that has arrived: every new chunk stays at the end
        cell.send_chunk([LINE[-1]] * 4, age_ms=10, suction=1.0)
        cell.deliver(4)
        cell.run(50)
    assert cell.node.state == "run" and cell.node.counters["holds"] == 0
    assert np.allclose(cell.plant.state.pos, sent[-1, :3], atol=1e-3)
    assert cell.plant.state.tool
    # per-cycle trace: stamps capture..apply, e2e = apply - capture (10 ms: applied at once)
    assert cell.node.reports.e2e.count == 16 and cell.node.reports.e2e_last_ns == 10 * MS
    traces = [e for e in iter(lambda: cell.watch.recv(timeout_ms=50), None) if e.topic == "trace"]
    assert len(traces) == 16
    st = traces[-1].body["stamps"]
    assert list(st)[0] == "capture" and list(st)[-1] == "apply"
    assert st["apply"] - st["capture"] == 10 * MS and traces[-1].body["cycle"] == cell.cycle


@pytest.mark.parametrize("continuous", [False, True], ids=["tokens", "continuous"])
def test_stale_chunk_is_rejected_and_counted_and_not_applied(cell, continuous):
    cell.send_chunk(LINE, age_ms=101, continuous=continuous)
    cell.deliver(4)
    c = cell.node.counters
    assert c["rejected_stale"] == 4 and c["chunks_accepted"] == 0 and c["waypoints_accepted"] == 0
    cell.run(300)
    assert cell.node.state == "idle" and cell.node.stack.holding
    assert np.allclose(cell.plant.state.pos, [0.0, 0.0, 0.2], atol=1e-6)


def test_chunk_with_a_wrong_tokenizer_hash_is_rejected(cell):
    cell.send_chunk(LINE, spec="0123456789abcdef")
    cell.deliver(4)
    c = cell.node.counters
    assert c["rejected_hash"] == 4 and c["chunks_accepted"] == 0
    cell.run(100)
    assert np.allclose(cell.plant.state.pos, [0.0, 0.0, 0.2], atol=1e-6)


def test_the_robot_is_its_publishers_src_unless_named():
    pub, cfg = types.SimpleNamespace(src="ctl"), ControllerConfig(gantry_control(), tokenizer=TOK)
    assert ControllerNode(Plant(), cfg, None, pub).robot == "ctl"
    assert ControllerNode(Plant(), cfg, None, pub, robot="cell7").robot == "cell7"


def test_a_chunk_for_another_robot_is_rejected_as_rejected_dest_and_not_applied(cell):
    assert cell.node.robot == "controller"  # default: the src its pub sends under
    cell.send_chunk(LINE, age_ms=10, dest="other-robot")
    cell.send_chunk(LINE, age_ms=10, dest="other-robot", continuous=True)
    cell.deliver(8)
    c = cell.node.counters
    assert c["rejected_dest"] == 8 and c["chunks_accepted"] == 0 and c["waypoints_accepted"] == 0
    assert sum(v for k, v in c.items() if k.startswith("rejected_")) == 8  # nothing else
    cell.run(100)
    assert cell.node.state == "idle" and cell.node.stack.holding
    assert np.allclose(cell.plant.state.pos, [0.0, 0.0, 0.2], atol=1e-6)
    cell.send_chunk(LINE, age_ms=10)  # the same chunk for this robot is taken
    cell.deliver(4)
    assert cell.node.counters["chunks_accepted"] == 1 and cell.node.state == "run"


def test_only_other_robots_chunks_for_a_second_are_said_as_a_misconfiguration(cell, capfd):
    cell.send_chunk(LINE, age_ms=10, dest="other-robot")
    cell.deliver(4)
    assert "other-robot" not in capfd.readouterr().err  # a fleet node may serve it first
    cell.t += 1100 * MS
    cell.send_chunk(LINE, age_ms=10, dest="other-robot")
    cell.deliver(4)
    assert "it is for robot 'other-robot', this is 'controller'" in capfd.readouterr().err
    assert cell.node.counters["rejected_dest"] == 8


def test_another_robots_chunks_from_this_robots_own_policy_are_counted_without_a_complaint(
    cell, capfd
):
    cell.send_chunk(LINE, age_ms=10, dest="other-robot")  # the node answered the other first
    cell.deliver(4)
    cell.send_chunk(LINE, age_ms=10)  # the policy serves this robot too: a fleet node
    cell.deliver(4)
    cell.t += 1100 * MS
    cell.send_chunk(LINE, age_ms=10, dest="other-robot")
    cell.deliver(4)
    c = cell.node.counters
    assert c["rejected_dest"] == 8 and c["chunks_accepted"] == 1
    assert "other-robot" not in capfd.readouterr().err


def test_a_waypoint_with_start_ns_0_is_due_at_capture(cell):
    cell.send_chunk(LINE, age_ms=10, start_ns=0, suction=1.0)
    cell.deliver(4)
    capture = cell.t - 10 * MS
    tracker = cell.node.stack.tracker
    assert tracker._ev_t == [capture + i * 50 * MS for i in range(4)]
    assert tracker.tool  # waypoint 0 was due at capture, 10 ms ago: on already
    # the v1 rule, start_ns = period_ns: waypoint 0 is due one period after capture
    cell.send_chunk(LINE, age_ms=5, start_ns=50 * MS, suction=0.0)
    cell.deliver(4)
    capture = cell.t - 5 * MS
    assert tracker._ev_t == [capture + (i + 1) * 50 * MS for i in range(4)]
    cell.run(44)
    assert tracker.tool  # waypoint 0 (suction off) is not due yet
    cell.run(1)
    assert not tracker.tool  # ... and is at capture + 50 ms


def test_a_continuous_chunk_is_followed_and_one_with_another_spec_is_rejected_hash(cell):
    cell.send_chunk(LINE, continuous=True, spec=TOK.hash)  # no tokens: the tokenizer's hash is
    cell.send_chunk(LINE, continuous=True, spec="0123456789abcdef")  # not this robot's spec
    cell.deliver(8)
    c = cell.node.counters
    assert c["rejected_hash"] == 8 and c["chunks_accepted"] == 0 and c["waypoints_accepted"] == 0
    cell.run(100)
    assert np.allclose(cell.plant.state.pos, [0.0, 0.0, 0.2], atol=1e-6)
    sent = cell.send_chunk(LINE, continuous=True, suction=1.0)  # spec = ACT.hash
    cell.deliver(4)
    assert c["chunks_accepted"] == 1 and c["waypoints_accepted"] == 4 and cell.node.state == "run"
    np.testing.assert_array_equal(cell.node.chunk.waypoints, sent)  # the values are the truth,
    assert not np.allclose(cell.tok.decode(cell.tok.encode(sent)), sent, atol=1e-6)  # not bins
    cell.run(50)
    for _ in range(15):
        cell.send_chunk([LINE[-1]] * 4, continuous=True, suction=1.0)
        cell.deliver(4)
        cell.run(50)
    assert cell.node.state == "run" and cell.node.counters["holds"] == 0
    assert np.allclose(cell.plant.state.pos, LINE[-1], atol=1e-3) and cell.plant.state.tool


def test_without_an_action_spec_a_continuous_chunk_is_rejected_hash():
    ctx = zmq.Context()
    c = Cell(ctx, action=None)
    try:
        c.send_chunk(LINE, continuous=True)
        c.deliver(4)
        assert c.node.counters["rejected_hash"] == 4 and c.node.counters["chunks_accepted"] == 0
        c.send_chunk(LINE)  # action-token chunks are still followed
        c.deliver(4)
        assert c.node.counters["chunks_accepted"] == 1
    finally:
        c.close()
        ctx.term()


def test_bad_tokens_are_rejected_exactly_as_many_as_sent(cell):
    good = cell.tok.encode(np.array([[0.02, 0.0, 0.2, 0.0]] * 3))
    bad = good.copy()
    bad[0, 1] = TOK.bins  # id past the last bin
    bad[1, 2] = -3  # negative id
    cell.send_chunk(LINE[:3], tokens=bad, indices=[0, 1])
    # values that disagree with their tokens: tokens are the truth, so the message is bad
    cell.policy.publish(
        "action_chunk",
        waypoint_body(
            99,
            0,
            1,
            np.array([0.3, 0.0, 0.2, 0.0], np.float32),
            spec=TOK.hash,
            period_ns=50 * MS,
            start_ns=50 * MS,
            dest=cell.node.robot,
            tokens=good[2],
        ),
        stamps={"capture": cell.t},
    )
    cell.deliver(3)
    c = cell.node.counters
    assert c["rejected_bad"] == 3 and c["chunks_accepted"] == 0 and c["waypoints_accepted"] == 0
    cell.run(100)
    assert cell.node.state == "idle"
    assert np.allclose(cell.plant.state.pos, [0.0, 0.0, 0.2], atol=1e-6)


def test_watchdog_holds_within_one_deadline_and_resumes_on_the_next_fresh_chunk(cell):
    far = [[0.1 * (i + 1), 0.0, 0.2] for i in range(4)]  # asks for more than vel_limit
    cell.send_chunk(far, age_ms=5, suction=1.0)
    cell.deliver(4)
    fed = cell.t
    log = []
    cell.run(100, log)  # exactly one deadline: still running
    assert cell.node.state == "run"
    cell.run(1, log)
    assert cell.node.state == "hold" and cell.node.stack.holding
    assert cell.node.counters["holds"] == 1 and cell.t - fed == 101 * MS
    v_at_hold = log[-1][0][0]
    assert v_at_hold > 0.3
    cell.run(600, log)
    ref_vel = np.array([r for r, _, _ in log[100:]])
    assert np.all(np.abs(np.diff(ref_vel, axis=0)) <= 2.0e-3 + 1e-12)  # hold_decel * dt
    assert np.all(ref_vel[int(v_at_hold / 2.0 * 1e3) + 2 :] == 0.0)
    assert np.abs(cell.plant.state.vel).max() < 2e-3 and cell.plant.state.tool
    # resumes on the next fresh chunk
    here = cell.plant.state.pos.copy()
    cell.send_chunk([here + [0.01, 0, 0]] * 4, age_ms=5, suction=1.0)
    cell.deliver(4)
    assert cell.node.state == "run" and not cell.node.stack.holding
    assert cell.node.counters["chunks_accepted"] == 2


def test_safe_hold_command_holds_and_ignores_chunks_until_cleared(cell):
    cell.send_chunk(LINE)
    cell.deliver(4)
    cell.run(20)
    cell.command("safe_hold")
    assert cell.node.state == "safe_hold" and cell.node.stack.holding
    cell.send_chunk(LINE)
    cell.deliver(4)
    assert cell.node.counters["rejected_hold"] == 4 and cell.node.stack.holding
    cell.command("clear")
    assert cell.node.state == "hold" and cell.node.stack.holding
    cell.send_chunk(LINE)
    cell.deliver(4)
    assert cell.node.state == "run" and cell.node.counters["chunks_accepted"] == 2


def test_tracking_starts_on_waypoint_zero_before_the_rest_arrive(cell):
    cell.send_chunk(LINE, indices=[0])
    cell.deliver(1)
    assert cell.node.state == "run" and cell.node.reports.e2e.count == 1
    cell.run(20)
    assert cell.node.stack.tracker.vel[0] > 0
    cell.send_chunk(LINE, indices=[1, 2, 3], cycle=cell.cycle, age_ms=30)  # same capture
    cell.deliver(3)
    assert cell.node.counters["chunks_accepted"] == 1
    assert cell.node.counters["waypoints_accepted"] == 4 and cell.node.reports.e2e.count == 1


def test_a_chunk_older_than_the_one_in_use_is_rejected_as_stale(cell):
    cell.send_chunk(LINE, age_ms=10)
    cell.deliver(4)
    cell.send_chunk(LINE, age_ms=30)  # a newer cycle number, but captured earlier
    cell.deliver(4)
    assert cell.node.counters["rejected_stale"] == 4 and cell.node.counters["chunks_accepted"] == 1


def test_health_is_published_with_the_counters(cell):
    cell.send_chunk(LINE, age_ms=200)
    cell.deliver(4)
    cell.run(250)
    health = [e for e in iter(lambda: cell.watch.recv(timeout_ms=50), None) if e.topic == "health"]
    assert 2 <= len(health) <= 4  # 10 Hz over 250 ms
    counters = health[-1].body["counters"]
    assert counters["rejected_stale"] == 4 and counters["ticks"] > 0
    assert health[-1].body["state"] == "idle"


def test_on_tick_hook_sees_every_tick():
    ctx = zmq.Context()
    calls = []
    c = Cell(ctx, on_tick=lambda state, now: calls.append(now))
    try:
        c.run(5)
        assert calls == [c.t - 4 * MS + k * MS for k in range(5)]
    finally:
        c.close()
        ctx.term()


def test_a_mismatched_tokenizer_hash_is_refused_at_construction():
    cfg = ControllerConfig(gantry_control(), tokenizer=TOK)
    with pytest.raises(ValueError, match="hash"):
        ControllerNode(Plant(), cfg, None, None, "ffffffffffffffff")


def test_a_repeated_or_inconsistent_waypoint_is_rejected_as_bad(cell):
    cell.send_chunk(LINE, indices=[0, 1])
    cell.send_chunk(LINE, indices=[1], cycle=cell.cycle)  # a repeat of waypoint 1
    cell.send_chunk(LINE[:3], indices=[2], cycle=cell.cycle)  # count 3, the cycle said 4
    cell.deliver(4)
    c = cell.node.counters
    assert c["waypoints_accepted"] == 2 and c["rejected_bad"] == 2 and c["chunks_accepted"] == 1


class SlowTicks:
    """The loop's clock on a busy host: every read 2 ms after the one before (a tick preempted
    between reading the clock at its start and draining its messages)."""

    def __init__(self):
        self.t = now_ns()

    def __call__(self) -> int:
        self.t += 2 * MS
        return self.t


def test_a_chunk_stamped_after_the_ticks_start_is_not_from_the_future():
    """A capture after the tick's `now` but before the drain read it is an honest stamp (taken
    before the fix: rejected_bad under load); one ahead of the clock read again is not."""
    clock = SlowTicks()
    with open_cell(clock=clock) as cell:
        cell.t = clock.t  # the next read (the tick's start) is t + 2 ms
        cell.send_chunk(LINE, age_ms=-3)  # captured at t + 3 ms: after the start, before the drain
        time.sleep(0.05)  # in the subscriber's queue before the tick starts
        cell.deliver(4)
        c = cell.node.counters
        assert c["rejected_bad"] == 0 and c["waypoints_accepted"] == 4, c
        cell.t = clock.t
        cell.send_chunk(LINE, age_ms=-1000)  # a second ahead of any read: a bogus stamp
        time.sleep(0.05)
        cell.deliver(4)
        assert c["rejected_bad"] == 4 and c["waypoints_accepted"] == 4, c


@pytest.fixture
def one_source_cell():
    with open_cell(one_source=True) as c:
        yield c


def test_two_nodes_serving_the_robot_it_takes_one_and_counts_the_other(one_source_cell):
    """A fleet partition: two nodes answer the same observations. The robot keeps to the node
    it took first, counts the other's waypoints, and switches only once the first has been
    silent for a chunk interval and the deadline (its watchdog holds by then anyway)."""
    cell = one_source_cell
    c = cell.node.counters
    cell.send_chunk(LINE)
    cell.deliver(4)
    cell.send_chunk(LINE, cycle=cell.cycle, via=cell.other)  # the same observation, answered again
    cell.deliver(4)
    assert c["chunks_accepted"] == 1 and c["waypoints_accepted"] == 4, c
    assert c["chunks_other_source"] == 4 and c["source_switches"] == 0, c
    cell.run(50)
    cell.send_chunk(LINE, via=cell.other)  # 50 ms after the first: still within its quiet time
    cell.deliver(4)
    assert c["chunks_other_source"] == 8 and c["chunks_accepted"] == 1, c
    cell.run(
        cell.node.watchdog.quiet_ns // MS + 1
    )  # the first node silent past it: the watchdog holds
    assert cell.node.state == "hold"
    cell.send_chunk(LINE, via=cell.other)
    cell.deliver(4)
    assert c["source_switches"] == 1 and c["chunks_accepted"] == 2, c
    assert cell.node.state == "run" and c["rejected_stale"] == 0


def test_stop_command_ends_the_real_time_loop(cell):
    cell.monitor.publish("command", {"cmd": "stop", "reason": "test"})
    cell.node.run(seconds=30.0)  # returns as soon as the stop arrives
    assert cell.node.state == "stopped" and cell.node.counters["commands"] == 1
    assert cell.node.stack.holding and cell.node.counters["ticks"] >= 1


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("health_hz", 0.0, "health_hz=0.0 must be > 0"),
        ("health_hz", -5.0, "health_hz=-5.0 must be > 0"),
        ("health_hz", float("nan"), "health_hz=nan must be > 0"),
        ("deadline_ns", 0, "deadline_ns=0 must be > 0"),
        ("chunk_interval_ns", -1, "chunk_interval_ns=-1 must be >= 0"),
        ("max_msgs_per_tick", 0, "max_msgs_per_tick=0 must be >= 1"),
        ("max_period_ns", 0, "max_period_ns=0 must be > 0"),
        ("name", "", "name is empty"),
    ],
)
def test_a_config_the_loop_cannot_run_with_is_refused_with_the_fix(field, value, says):
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        ControllerConfig(gantry_control(), tokenizer=TOK, **{field: value})
    assert "e.g." in str(e.value) or "give the node a name" in str(e.value)  # the fix


def test_every_wrong_setting_is_named_at_once():
    with pytest.raises(ValueError) as e:
        ControllerConfig(gantry_control(), tokenizer=TOK, health_hz=0, deadline_ns=-1)
    assert "health_hz=0" in str(e.value) and "deadline_ns=-1" in str(e.value)


def test_a_config_from_yaml_data_is_validated_too():
    with pytest.raises(ValueError, match="health_hz"):
        ControllerConfig.from_dict(
            {"tokenizer": TOK.to_dict(), "health_hz": 0, "control": gantry_control().to_dict()}
        )


def test_node_config_loads_from_yaml_data_with_a_tokenizer_file(tmp_path):
    TOK.save(tmp_path / "tok.json")
    control = gantry_control(kp=(1.0, 2.0, 3.0)).to_dict()
    cfg = ControllerConfig.from_dict(
        {"tokenizer": str(tmp_path / "tok.json"), "deadline_ns": 80 * MS, "control": control}
    )
    assert cfg.tokenizer.hash == TOK.hash and cfg.deadline_ns == 80 * MS
    assert cfg.control.axis("kp") == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("continuous", [False, True], ids=["tokens", "continuous"])
def test_late_waypoints_are_reported_once_per_cycle_as_a_trace_without_apply(cell, continuous):
    cell.send_chunk(LINE, age_ms=101, continuous=continuous)
    cell.deliver(4)
    assert cell.node.counters["rejected_stale"] == cell.node.counters["late_waypoints"] == 4
    traces = [e for e in iter(lambda: cell.watch.recv(timeout_ms=50), None) if e.topic == "trace"]
    assert len(traces) == 1
    body = traces[0].body
    assert body["fields"] == {"late_index": 0.0} and "apply" not in body["stamps"]
    assert body["stamps"]["recv"] - body["stamps"]["capture"] > 100 * MS


def test_late_waypoints_during_a_commanded_hold_are_not_reported_as_misses(cell):
    cell.command("safe_hold")
    cell.send_chunk(LINE, age_ms=101)
    cell.deliver(4)
    assert cell.node.counters["rejected_stale"] == 4 and cell.node.counters["late_waypoints"] == 0
    traces = [e for e in iter(lambda: cell.watch.recv(timeout_ms=50), None) if e.topic == "trace"]
    assert traces == []


@pytest.fixture
def real_clock_cell():
    with open_cell(clock=now_ns) as c:
        yield c


def test_a_chunk_the_ticks_own_work_carries_past_the_deadline_is_dropped_not_applied(
    real_clock_cell,
):
    """On the real clock: a chunk 60 ms old is taken in time, but read() then takes 45 ms, so
    its first setpoint would go out 105 ms after capture. It is dropped and reported late;
    with a fast read() the next one is applied, at most a deadline after its capture."""
    cell = real_clock_cell
    slow = {"s": 0.045}
    read = cell.plant.read
    cell.plant.read = lambda: (time.sleep(slow["s"]), read())[1]
    cell.t = now_ns()
    cell.send_chunk(LINE, age_ms=60)
    for _ in range(200):
        cell.node.tick()
        if cell.seen() >= 4:
            break
    c = cell.node.counters
    assert (c["chunks_accepted"], c["late_applies"], c["rejected_stale"]) == (1, 1, 0)
    assert (
        cell.node.state == "idle" and cell.node.stack.holding and cell.node.reports.e2e.count == 0
    )
    traces = [
        e.body for e in iter(lambda: cell.watch.recv(timeout_ms=50), None) if e.topic == "trace"
    ]
    assert [t["fields"] for t in traces] == [{"late_index": 0.0}]
    assert "apply" not in traces[0]["stamps"]
    slow["s"] = 0.0
    cell.t = now_ns()
    cell.send_chunk(LINE, age_ms=10)
    for _ in range(200):
        cell.node.tick()
        if cell.node.reports.e2e.count:
            break
        time.sleep(0.001)
    assert cell.node.state == "run" and c["late_applies"] == 1
    assert 10 * MS <= cell.node.reports.e2e_last_ns <= cell.node.cfg.deadline_ns


def test_a_stop_landing_while_a_waypoint_is_taken_still_ends_the_loop_after_that_tick(cell):
    """stop() from a signal handler or another thread can land after a waypoint's checks and
    before it is applied (which sets the state to run): the tick still ends stopped."""
    add = cell.node.chunk.add

    def stop_then_add(*args):
        cell.node.stop()  # as a SIGINT handler or a simulator's hook would, mid-waypoint
        return add(*args)

    cell.node.chunk.add = stop_then_add
    cell.send_chunk(LINE[:1] * 4, age_ms=10, indices=[0])
    for _ in range(200):
        if cell.node.counters["waypoints_accepted"]:
            break
        cell.node.tick()
        time.sleep(0.001)
    assert cell.node.counters["waypoints_accepted"] == 1 and cell.node.state == "stopped"
