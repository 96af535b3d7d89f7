"""What a node under overload asks of a robot, the robot's side (controllers.pace): an executed
horizon keeps a chunk fresh, and the plan, until its last waypoint is due and never past it;
the robot sends observations no faster than the period asked. Over real inproc sockets, on the
test's clock (tests/test_controller_node.py's Cell), so every timing verdict is exact."""

import contextlib
import time

import numpy as np
import pytest
import zmq
from conftest import gantry_control
from test_controller_node import ACT, TOK, Cell, _sync

from controllers.hardware import Observation
from controllers.node import ControllerConfig, ControllerNode
from controllers.pace import Pace
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Subscriber

MS = 1_000_000
PERIOD = 50 * MS
# 4 waypoints (the horizon) at 50 ms from 50 ms after capture; executes 4: the last due 200 ms
# after capture, twice the deadline
AT = [[0.02 * (i + 1), 0.0, 0.2] for i in range(4)]


@contextlib.contextmanager
def paced_cell(open_loop_ms=500.0):
    """A Cell whose robot takes asks (open_loop_ms; None: an old robot, it takes none)."""
    ctx = zmq.Context()
    c = Cell(ctx)
    cfg = ControllerConfig(
        tokenizer=TOK,
        action=ACT,
        open_loop_ms=open_loop_ms,
        control=gantry_control(mass=(2.0,) * 3, hold_decel=(2.0,) * 3),
    )
    c.node = ControllerNode(c.plant, cfg, c.sub, c.pub, TOK.hash, clock=lambda: c.t)
    c.obs = Subscriber("inproc://ctl", ["obs"], ctx=ctx)
    _sync(c.pub, c.obs, "obs", {"values": {}, "ints": {}})
    try:
        yield c
    finally:
        c.obs.close()
        c.close()
        ctx.term()


def send(c, *, age_ms, executes=None, obs_period_ms=None, points=AT, deliver=True):
    """A continuous chunk captured age_ms ago, asking what is given, taken by the node's
    ticks at the current time (deliver=False: only sent)."""
    c.cycle += 1
    ask = {}
    if executes is not None:
        ask["executes"] = executes
    if obs_period_ms is not None:
        ask["obs_period_ns"] = int(obs_period_ms * MS)
    w = np.zeros((len(points), 4), np.float32)
    w[:, :3] = points
    for i in range(len(points)):
        c.policy.publish(
            "action_chunk",
            waypoint_body(
                c.cycle,
                i,
                len(points),
                w[i],
                spec=ACT.hash,
                period_ns=PERIOD,
                start_ns=PERIOD,
                dest=c.node.robot,
                ask=ask or None,
            ),
            stamps={"capture": c.t - age_ms * MS},
        )
    if deliver:
        c.deliver(len(points))


@pytest.mark.parametrize("age_ms", [150, 199])
def test_a_chunk_with_an_executed_horizon_is_taken_past_the_deadline_within_it(age_ms):
    with paced_cell() as c:
        send(c, age_ms=age_ms, executes=4)
        k = c.node.counters
        assert k["chunks_accepted"] == 1 and k["chunks_executes"] == 1 and k["rejected_stale"] == 0
        assert c.node.state == "run" and k["late_applies"] == 0
        assert c.node.reports.e2e_last_ns == age_ms * MS  # applied past the deadline


def test_a_chunk_past_its_executed_horizon_is_never_applied_and_is_counted():
    with paced_cell() as c:
        send(c, age_ms=200, executes=4)  # its last waypoint is due now: nothing left
        k = c.node.counters
        assert k["rejected_stale"] == 4 and k["chunks_accepted"] == 0
        c.run(50)
        assert c.node.state == "idle" and c.node.reports.e2e.count == 0


def test_a_robot_that_takes_no_asks_holds_a_chunk_that_asks_to_the_deadline():
    with paced_cell(open_loop_ms=None) as c:
        send(c, age_ms=150, executes=4)
        k = c.node.counters
        assert k["rejected_stale"] == 4 and k["chunks_accepted"] == 0
        assert k["chunks_executes"] == 0


def test_the_open_loop_caps_the_executed_horizon():
    with paced_cell(open_loop_ms=150.0) as c:  # executes 4 would be 200 ms: 150 at most
        send(c, age_ms=149, executes=4)
        assert c.node.counters["chunks_accepted"] == 1
        send(c, age_ms=150, executes=4)
        assert c.node.counters["rejected_stale"] == 4


def test_the_plan_lasts_until_the_horizons_last_waypoint_is_due_and_not_past_it():
    with paced_cell() as c:
        send(c, age_ms=10, executes=4)
        c.run(189)  # 199 ms after capture: past deadline + interval, still the plan
        assert c.node.state == "run" and c.node.counters["holds"] == 0
        c.run(1)  # waypoint 3 is due: the plan ends, nothing new came
        assert c.node.state == "hold" and c.node.counters["holds"] == 1
        send(c, age_ms=10)  # a chunk without a horizon: the deadline rule again
        c.run(100)
        assert c.node.state == "run"
        c.run(1)
        assert c.node.state == "hold" and c.node.counters["holds"] == 2


def test_a_late_commit_past_the_horizon_is_dropped_not_applied():
    with paced_cell() as c:
        send(c, age_ms=190, executes=4, deliver=False)  # taken 10 ms within its window ...
        time.sleep(0.1)  # (all 4 waypoints wait in the socket: one tick takes them)
        read = c.plant.read

        def slow_read():  # ... but the tick's own read() then takes 20 ms
            c.t += 20 * MS
            c.plant.read = read
            return read()

        c.plant.read = slow_read
        c.node.tick()
        k = c.node.counters
        assert k["chunks_accepted"] == 1 and k["late_applies"] == 1 and c.node.state == "idle"
        assert c.node.reports.e2e.count == 0


def obs_seen(c) -> list:
    return [e for e in iter(lambda: c.obs.recv(timeout_ms=50), None) if e.topic == "obs"]


def test_the_robot_sends_no_faster_than_the_period_asked_and_says_it_takes_asks():
    with paced_cell() as c:
        o = Observation(0, {"x": np.zeros(2, np.float32)}, {})

        def observe_every(ms, ticks):
            sent = 0
            for t in range(ticks):
                if t % ms == 0:
                    o.capture_ns = c.t
                    sent += c.node.send_obs(o)
                c.run(1)
            return sent

        assert observe_every(50, 200) == 4  # nothing asked: every one
        send(c, age_ms=10, executes=4, obs_period_ms=100)
        # one every 100 ms: 2 of 5 sent, 3 held back
        assert observe_every(50, 250) == 2 and c.node.counters["obs_slowed"] == 3
        got = obs_seen(c)
        assert got and all(e.body["open_loop_ns"] == 500 * MS for e in got)
        send(c, age_ms=10)  # a chunk that asks nothing ends the ask
        assert observe_every(50, 200) == 4 and c.node.counters["obs_slowed"] == 3


def test_an_old_robot_sends_the_same_obs_as_before():
    with paced_cell(open_loop_ms=None) as c:
        o = Observation(c.t, {"x": np.zeros(2, np.float32)}, {})
        assert c.node.send_obs(o)
        (env,) = obs_seen(c)
        assert set(env.body) == {"values", "ints"}


def test_an_ask_lapses_when_the_node_stops_answering():
    p = Pace(500 * MS, 100 * MS)
    p.taken({"obs_period_ns": 200 * MS, "start_ns": 0, "period_ns": PERIOD}, 0)
    p.sent(0)
    assert p.hold_back(100 * MS) and not p.hold_back(200 * MS)
    p.sent(400 * MS)
    assert not p.hold_back(500 * MS)  # 2 periods and a deadline after that chunk: lapsed
    p.taken({"obs_period_ns": 900 * MS}, 0)
    assert p.asked_ns == 500 * MS  # never longer than the robot's own open loop
