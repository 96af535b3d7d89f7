"""What a node under overload asks of a robot, the node's side (rtinfer.inference.horizon): the
executed horizon it grants by the policy's horizon and the overload, the period it asks, and
that a robot which did not say it takes asks, or any robot at full quality, is asked nothing."""

import pytest

from rtinfer.inference.budget import Budget, BudgetLevel
from rtinfer.inference.horizon import grant
from rtinfer.inference.robots import Robots
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.wire import Envelope, decode, encode

MS = 1_000_000
KW = dict(horizon=8, period_ns=50 * MS, start_ns=50 * MS, deadline_ns=100 * MS)


def test_the_horizon_covers_the_next_observation_and_its_deadline():
    # asked for one every 150 ms: the next chunk lands by 150 + 100 ms after this capture, so
    # this one must last that long: waypoint 4 is due at 50 + 4 x 50 = 250 ms
    g = grant(7, 1000 * MS, degraded=True, asked_period_ns=150 * MS, interval_ns=50 * MS, **KW)
    assert (g.seq, g.executes, g.window_ns, g.obs_period_ns) == (7, 5, 250 * MS, 150 * MS)
    # degraded to a cheaper level only: the robot's own interval is the next observation
    g = grant(7, 1000 * MS, degraded=True, asked_period_ns=None, interval_ns=50 * MS, **KW)
    assert (g.executes, g.window_ns, g.obs_period_ns) == (3, 150 * MS, None)


def test_the_horizon_is_at_most_the_chunk_and_the_robots_open_loop():
    g = grant(1, 10_000 * MS, degraded=True, asked_period_ns=900 * MS, interval_ns=None, **KW)
    assert g.executes == 8 and g.window_ns == 400 * MS
    g = grant(1, 220 * MS, degraded=True, asked_period_ns=900 * MS, interval_ns=None, **KW)
    assert g.executes == 4 and g.window_ns == 200 * MS  # 50 + 3 x 50 <= 220
    fields, window = g.fields(2, 50 * MS, 50 * MS)  # a level that sent 2 waypoints
    assert fields == {"executes": 2, "obs_period_ns": 900 * MS} and window == 100 * MS


@pytest.mark.parametrize(
    "open_loop_ms, degraded, asked_ms",
    [
        (None, True, 150),  # the robot did not say it takes asks
        (1000, False, None),  # full quality, nothing asked
        (100, True, None),  # an open loop within the deadline: a horizon would gain nothing
    ],
)
def test_nothing_is_asked(open_loop_ms, degraded, asked_ms):
    assert (
        grant(
            1,
            None if open_loop_ms is None else open_loop_ms * MS,
            degraded=degraded,
            asked_period_ns=None if asked_ms is None else asked_ms * MS,
            interval_ns=None,
            **KW,
        )
        is None
    )


def test_a_period_is_still_asked_when_no_horizon_gains_anything():
    g = grant(1, 100 * MS, degraded=True, asked_period_ns=300 * MS, interval_ns=None, **KW)
    assert (g.executes, g.window_ns, g.obs_period_ns) == (None, 0, 300 * MS)
    assert g.fields(8, 50 * MS, 50 * MS) == ({"obs_period_ns": 300 * MS}, 0)


def _robots() -> Robots:
    levels = [BudgetLevel(6, 0, 8), BudgetLevel(3, 0, 4)]
    return Robots(
        Budget(levels, 100 * MS),
        remote=False,
        period_ns=50 * MS,
        start_ns=50 * MS,
        say=lambda *a, **k: None,
    )


def _obs(name, seq, open_loop_ns=None):
    body = {"values": {}, "ints": {}}
    if open_loop_ns is not None:
        body["open_loop_ns"] = open_loop_ns
    return Envelope(2, "obs", seq, name, {"capture": seq * 50 * MS}, body)


def test_a_robot_that_takes_asks_is_granted_one_under_load_and_answered_until_its_window():
    r = _robots()
    for name in ("new", "old"):  # joined (a join plans the load again: nothing timed yet)
        r.offer(_obs(name, 0, 1000 * MS if name == "new" else None), 0, 100 * MS)
    assert r.ask("new", 0) is None
    r.schedule.load_level = 1  # degraded for the load: level 1 sends 4 waypoints
    new = r.offer(_obs("new", 1, 1000 * MS), 50 * MS, 100 * MS)
    old = r.offer(_obs("old", 1), 50 * MS, 100 * MS)
    g = r.ask("new", 1)
    # its interval, 50 ms, and the deadline after this capture: waypoint 2, due at 150 ms
    assert g.executes == 3 and g.window_ns == 150 * MS
    assert new.obs_deadline_ns == 150 * MS  # the schedule answers it until its window
    assert r.ask("new", 2) is None  # another observation's chunk: not this grant
    assert r.ask("old", 1) is None and old.obs_deadline_ns == 100 * MS
    r.schedule.load_level = 0  # full quality again: nothing asked
    r.offer(_obs("new", 2, 1000 * MS), 100 * MS, 100 * MS)
    assert r.ask("new", 2) is None and r.ask("new", 1) is g


def test_the_ask_is_on_the_wire_and_a_chunk_without_it_is_the_same_bytes_as_before():
    import numpy as np

    v = np.array([0.5, -1.0], np.float32)
    plain = dict(spec="ab12", period_ns=50 * MS, start_ns=50 * MS, dest="arm")
    before = encode(
        "action_chunk", waypoint_body(7, 0, 4, v, **plain), seq=1, src="inf", stamps={"capture": 1}
    )
    assert before == encode(
        "action_chunk",
        waypoint_body(7, 0, 4, v, **plain, ask=None),
        seq=1,
        src="inf",
        stamps={"capture": 1},
    )
    asked = encode(
        "action_chunk",
        waypoint_body(7, 0, 4, v, **plain, ask={"executes": 3, "obs_period_ns": 150 * MS}),
        seq=1,
        src="inf",
        stamps={"capture": 1},
    )
    body = decode(asked).body
    assert list(body)[-2:] == ["executes", "obs_period_ns"] and body["executes"] == 3


def test_an_observation_past_the_deadline_within_its_window_is_taken_only_from_a_robot_that_asks():
    r = _robots()
    for name in ("new", "old"):
        r.offer(_obs(name, 0, 1000 * MS if name == "new" else None), 0, 100 * MS)
    r.schedule.load_level = 1
    for name in ("new", "old"):  # heard at 50 ms: an interval of 50 ms, a window of 150 ms
        r.offer(_obs(name, 1, 1000 * MS if name == "new" else None), 50 * MS, 100 * MS)
    # captured at 100 ms, read 130 ms later (a busy node): past the deadline, within the window
    new = r.offer(_obs("new", 2, 1000 * MS), 230 * MS, 100 * MS)
    old = r.offer(_obs("old", 2), 230 * MS, 100 * MS)
    assert new is not None and new.waiting.seq == 2 and r.ask("new", 2).window_ns == 150 * MS
    assert old is None and r.counters["obs_stale"] == 1
