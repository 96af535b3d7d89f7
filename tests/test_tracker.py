"""SetpointTracker: exact at waypoints when unconstrained, limits always, no jumps at hand-over."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controllers.tracker import SetpointTracker

MS = 1_000_000
P = 50 * MS  # waypoint period


def _chunk(points, suction=0.0):
    w = np.zeros((len(points), 4))
    w[:, :3] = points
    w[:, 3] = suction
    return w


def _run(tr, t_from, t_to, log=None):
    for t in range(t_from, t_to + 1, MS):
        pos, vel, _ = tr.update(t)
        if log is not None:
            log.append((t, pos.copy(), vel.copy()))


def _check_limits(log, vmax, amax, dt=1e-3, eps=1e-9):
    pos = np.array([p for _, p, _ in log])
    vel = np.array([v for _, _, v in log])
    assert np.all(np.abs(vel) <= vmax + eps)
    assert np.all(np.abs(np.diff(vel, axis=0)) <= amax * dt + eps)
    assert np.all(np.abs(np.diff(pos, axis=0)) <= vmax * dt + eps)


def test_reference_passes_through_waypoints_at_their_times_when_limits_do_not_bind():
    tr = SetpointTracker(10.0, 1000.0)
    tr.reset([0.0, 0.0, 0.2], 0)
    pts = [[0.01, 0.0, 0.2], [0.03, 0.01, 0.19], [0.04, 0.03, 0.17], [0.04, 0.04, 0.15]]
    tr.set_chunk(_chunk(pts), capture_ns=0, period_ns=P, now_ns=0)
    for i, p in enumerate(pts):
        _run(tr, tr.t_ns + MS, (i + 1) * P)
        assert np.allclose(tr.pos, p, atol=1e-12)
    assert np.allclose(tr.vel, 0.0)  # a complete chunk ends at rest
    _run(tr, tr.t_ns + MS, 400 * MS)
    assert np.allclose(tr.pos, pts[-1], atol=1e-12) and np.allclose(tr.vel, 0.0)


def test_monotone_waypoints_give_a_reference_without_overshoot():
    tr = SetpointTracker(10.0, 1000.0)
    tr.reset([0.0, 0.0, 0.2], 0)
    pts = [[0.0, 0.0, 0.2], [0.0, 0.0, 0.15], [0.0, 0.0, 0.1], [0.0, 0.0, 0.1]]
    tr.set_chunk(_chunk(pts), 0, P, 0)
    log = []
    _run(tr, MS, 300 * MS, log)
    z = np.array([p[2] for _, p, _ in log])
    assert z.max() <= 0.2 + 1e-12 and z.min() >= 0.1 - 1e-12


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.floats(-0.5, 0.5), min_size=3, max_size=3), min_size=8, max_size=8),
    st.integers(10, 90),
    st.integers(0, 60),
)
def test_velocity_and_acceleration_limits_hold_over_a_trajectory(points, handover_ms, lag_ms):
    vmax, amax = np.array([0.5, 0.5, 0.3]), np.array([3.0, 3.0, 2.0])
    tr = SetpointTracker(vmax, amax, blend_ns=15 * MS)
    tr.reset([0.0, 0.0, 0.0], 0)
    log = []
    tr.set_chunk(_chunk(points[:4]), capture_ns=0, period_ns=P, now_ns=0)
    _run(tr, MS, handover_ms * MS, log)
    # a newer chunk, captured lag_ms before it arrives (its first waypoints may be past)
    t = handover_ms * MS
    tr.set_chunk(_chunk(points[4:]), capture_ns=t - lag_ms * MS, period_ns=P, now_ns=t)
    _run(tr, t + MS, t + 800 * MS, log)
    _check_limits(log, vmax, amax)


def test_hand_over_to_a_newer_chunk_does_not_jump_and_the_new_chunk_wins():
    vmax, amax = 1.0, 200.0
    tr = SetpointTracker(vmax, amax)
    tr.reset([0.0, 0.0, 0.1], 0)
    old = [[0.015 * (i + 1), 0.0, 0.1] for i in range(4)]  # 0.3 m/s along +x
    tr.set_chunk(_chunk(old), 0, P, 0)
    log = []
    _run(tr, MS, 70 * MS, log)
    assert tr.vel[0] > 0.2
    t = 70 * MS
    new = [[0.03, 0.01, 0.1], [0.035, 0.02, 0.1], [0.035, 0.03, 0.1], [0.035, 0.035, 0.1]]
    tr.set_chunk(_chunk(new), capture_ns=t - 20 * MS, period_ns=P, now_ns=t)
    _run(tr, t + MS, (t - 20 * MS) + 2 * P, log)
    pos = np.array([p for _, p, _ in log])
    k = 69  # step k = pos(71 ms) - pos(70 ms): the first step on the new plan
    # velocity is continuous across the hand-over: the step changes by at most amax*dt^2
    step = np.diff(pos, axis=0)
    assert np.abs(step[k] - step[k - 1]).max() <= amax * 1e-6 + 1e-12
    assert np.abs(step).max() < 0.5e-3
    _check_limits(log, vmax, amax)
    # newer chunk wins: its waypoint 1 is met exactly at its time (limits not binding)
    assert tr.t_ns == (t - 20 * MS) + 2 * P
    assert np.allclose(tr.pos, new[1], atol=1e-9)


def test_blend_window_is_continuous_and_ends_on_the_new_chunk():
    tr = SetpointTracker(1.0, 100.0, blend_ns=20 * MS)
    tr.reset([0.0, 0.0, 0.1], 0)
    tr.set_chunk(_chunk([[0.015 * (i + 1), 0.0, 0.1] for i in range(4)]), 0, P, 0)
    log = []
    _run(tr, MS, 60 * MS, log)
    new = [[0.02, -0.01, 0.1], [0.02, -0.02, 0.1], [0.02, -0.02, 0.1], [0.02, -0.02, 0.1]]
    tr.set_chunk(_chunk(new), capture_ns=60 * MS, period_ns=P, now_ns=60 * MS)
    _run(tr, 61 * MS, 160 * MS, log)
    _check_limits(log, 1.0, 100.0)
    assert np.allclose(tr.pos, new[1], atol=1e-9)


def test_streamed_waypoints_extend_the_plan_without_jumps():
    tr = SetpointTracker(10.0, 1000.0)
    tr.reset([0.0, 0.0, 0.0], 0)
    pts = [[0.01 * (i + 1), 0.0, 0.0] for i in range(4)]
    log = []
    for i in range(4):  # waypoint i arrives 5 ms after i - 1
        t = i * 5 * MS
        _run(tr, tr.t_ns + MS, t, log)
        tr.set_chunk(_chunk(pts[: i + 1]), 0, P, t, complete=(i == 3))
    _run(tr, tr.t_ns + MS, 4 * P, log)
    assert np.allclose(tr.pos, pts[-1], atol=1e-12)
    pos = np.array([p for _, p, _ in log])
    assert np.abs(np.diff(pos, axis=0)).max() < 1e-3


def test_waypoints_already_past_are_still_reached_within_limits():
    tr = SetpointTracker(0.5, 3.0)
    tr.reset([0.0, 0.0, 0.0], 0)
    log = []
    # captured 300 ms ago: every waypoint time has passed
    tr.set_chunk(_chunk([[0.1, 0.0, 0.0]] * 4), capture_ns=-300 * MS, period_ns=P, now_ns=0)
    _run(tr, MS, 1000 * MS, log)
    _check_limits(log, 0.5, 3.0)
    assert np.allclose(tr.pos, [0.1, 0.0, 0.0], atol=1e-6) and np.allclose(tr.vel, 0, atol=1e-6)


def test_the_tool_switches_when_reference_time_reaches_the_waypoint_time():
    tr = SetpointTracker(1.0, 10.0)
    tr.reset([0.0, 0.0, 0.0], 0)
    w = _chunk([[0.0, 0.0, 0.0]] * 4)
    w[:, 3] = [0.0, 1.0, 1.0, 0.0]  # on at waypoint 1 (t=100 ms), off at waypoint 3 (200 ms)
    tr.set_chunk(w, 0, P, 0)
    states = {}
    for t in range(MS, 250 * MS, MS):
        tr.update(t)
        states[t] = tr.tool
    assert (states[99 * MS], states[100 * MS], states[199 * MS], states[200 * MS]) == (0, 1, 1, 0)


def test_brake_stops_within_the_deceleration_limit_holds_and_keeps_the_tool():
    tr = SetpointTracker(1.0, 20.0, hold_decel=4.0)
    tr.reset([0.0, 0.0, 0.0], 0)
    w = _chunk([[0.03 * (i + 1), 0.0, 0.0] for i in range(4)], suction=1.0)
    tr.set_chunk(w, 0, P, 0)
    _run(tr, MS, 60 * MS)
    v0 = tr.vel[0]
    assert v0 > 0.4 and tr.tool
    tr.brake(60 * MS)
    log = []
    _run(tr, 61 * MS, 400 * MS, log)
    vel = np.array([v for _, _, v in log])
    assert np.all(np.abs(np.diff(vel, axis=0)) <= 4.0e-3 + 1e-12)
    stop_ms = next(i for i, v in enumerate(vel) if np.all(v == 0.0)) + 1
    assert stop_ms <= np.ceil(v0 / 4.0 * 1e3) + 1
    pos = np.array([p for _, p, _ in log])
    assert np.all(pos[stop_ms:] == pos[-1]) and tr.tool and tr.braking


def test_a_chunk_faster_than_the_limits_is_not_overshot_at_its_end():
    vmax, amax = 0.6, 3.0
    tr = SetpointTracker(vmax, amax)
    tr.reset([0.0, 0.0, 0.0], 0)
    log = []
    # 0.4 m/s from rest within 40 ms needs 10 m/s^2; then a 20 Hz policy keeps the end point
    tr.set_chunk(_chunk([[0.02 * (i + 1), 0.0, 0.0] for i in range(4)]), -10 * MS, P, 0)
    for k in range(1, 16):
        _run(tr, tr.t_ns + MS, k * P, log)
        tr.set_chunk(_chunk([[0.08, 0.0, 0.0]] * 4), k * P - 10 * MS, P, k * P)
    _run(tr, tr.t_ns + MS, 1000 * MS, log)
    _check_limits(log, vmax, amax)
    x = np.array([p[0] for _, p, _ in log])
    assert x.max() <= 0.08 + 1e-6
    assert np.allclose(tr.pos, [0.08, 0.0, 0.0], atol=1e-9) and np.allclose(tr.vel, 0.0)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.lists(st.floats(-0.3, 0.3), min_size=3, max_size=3), min_size=4, max_size=4),
    st.lists(st.integers(0, 90), min_size=6, max_size=6),
)
def test_a_20hz_stream_of_chunks_stays_within_limits_and_ends_at_rest(points, lags_ms):
    vmax, amax = np.array([0.5, 0.5, 0.3]), np.array([3.0, 3.0, 2.0])
    tr = SetpointTracker(vmax, amax)
    tr.reset([0.0, 0.0, 0.0], 0)
    log = []
    for k, lag in enumerate(lags_ms):  # each chunk re-targets the same points, shifted in time
        t = k * P
        _run(tr, tr.t_ns + MS, t, log)
        tr.set_chunk(_chunk(points), capture_ns=t - lag * MS, period_ns=P, now_ns=t)
    _run(tr, tr.t_ns + MS, tr.t_ns + 2000 * MS, log)
    _check_limits(log, vmax, amax)
    assert np.allclose(tr.pos, points[-1], atol=1e-6) and np.allclose(tr.vel, 0.0, atol=1e-6)
