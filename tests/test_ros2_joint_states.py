"""The bridge's JointState checks (rtinfer_ros2.joint_states) on their own, without ROS 2: any
order of names is taken and reordered; missing or extra names, NaN positions and stamps from
the future, and velocities of another length are refused and counted; a zero or an old stamp
is taken and counted; a message without velocities gets them differentiated."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from rtinfer_ros2.joint_states import LatestJointState

J = ["base", "shoulder", "elbow", "wrist"]


def msg(names, pos, vel=(), ahead_ns=0, wall_ns=None):
    t = (time.time_ns() if wall_ns is None else wall_ns) + ahead_ns
    stamp = SimpleNamespace(sec=t // 1_000_000_000, nanosec=t % 1_000_000_000)
    return SimpleNamespace(
        name=list(names),
        position=list(pos),
        velocity=list(vel),
        header=SimpleNamespace(stamp=stamp),
    )


def latest():
    pos, vel = np.zeros(4), np.zeros(4)
    return LatestJointState(J, "/arm/joint_states", future_ns=5_000_000), pos, vel


def test_names_in_any_order_are_reordered_to_the_axes():
    js, pos, vel = latest()
    js.on_message(msg(J[::-1], [4.0, 3.0, 2.0, 1.0], [0.4, 0.3, 0.2, 0.1]))
    capture, recv = js.copy_into(pos, vel)
    assert pos.tolist() == [1.0, 2.0, 3.0, 4.0] and vel.tolist() == [0.1, 0.2, 0.3, 0.4]
    assert 0 < capture <= recv and js.counters["joint_states"] == 1


def test_bad_messages_are_refused_counted_and_said_once_per_kind(capsys):
    js, pos, vel = latest()
    js.on_message(msg(J, [0.1, 0.2, 0.3, 0.4]))
    for _ in range(3):
        js.on_message(msg(J[:3], [1.0, 1.0, 1.0]))  # one missing
        js.on_message(msg(J + ["gripper"], [1.0] * 5))  # one extra
        js.on_message(msg(J, [np.nan, 1.0, 1.0, 1.0]))  # not finite
        js.on_message(msg(J, [1.0] * 4, ahead_ns=1_000_000_000))  # 1 s in the future
    assert js.refused() == {"js_names": 6, "js_nan": 3, "js_velocity": 0, "js_future": 3}
    js.copy_into(pos, vel)
    assert pos.tolist() == [0.1, 0.2, 0.3, 0.4] and js.counters["joint_states"] == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all("said once" in ln for ln in lines)


def test_velocities_are_differentiated_when_absent():
    js, pos, vel = latest()
    t0 = time.time_ns() - 20_000_000
    js.on_message(msg(J, [0.0] * 4, wall_ns=t0))
    js.on_message(msg(J, [0.01, 0.0, -0.02, 0.0], wall_ns=t0 + 10_000_000))
    js.copy_into(pos, vel)
    assert np.allclose(vel, [1.0, 0.0, -2.0, 0.0], atol=0.01)  # the stamps, not receipt times


def test_a_wrong_velocity_length_is_refused_a_zero_or_old_stamp_taken_and_counted(capsys):
    js, pos, vel = latest()
    js.on_message(msg(J, [0.1] * 4, [0.0] * 3))  # 3 velocities for 4
    unstamped = msg(J, [0.2] * 4)
    unstamped.header.stamp = SimpleNamespace(sec=0, nanosec=0)
    js.on_message(unstamped)
    js.on_message(msg(J, [0.3] * 4, ahead_ns=-300_000_000))  # 300 ms behind
    assert js.refused()["js_velocity"] == 1 and js.counters["joint_states"] == 2
    assert js.counters["js_unstamped"] == 1 and js.counters["js_past"] == 1
    capture, recv = js.copy_into(pos, vel)
    assert pos.tolist() == [0.3] * 4 and 250_000_000 < recv - capture < 400_000_000
    kinds = [
        ln.split("counted as ")[1].split(";")[0] for ln in capsys.readouterr().err.splitlines()
    ]
    assert kinds == ["js_velocity", "js_unstamped", "js_past"]
