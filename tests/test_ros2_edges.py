"""Edges of the ROS 2 bridge a user met, each through real processes in a network namespace:
a JointState whose velocity has the wrong length is refused and counted (js_velocity), one
stamped 0 is counted and said once with the fix (js_unstamped), a robot clock behind this
host's is counted (js_past) and named by the end-of-run line, and the hold trajectory sent
when the bridge stops is counted like every other command."""

from __future__ import annotations

import json
import signal

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
from tests.ros2_host import RosHost, available  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)

POLICY = "models/zoo/arm-reach-bc"
# A robot publishing JointState at 100 Hz: OFFSET_MS behind (negative) this host's clock;
# after 1 s, every other message one of KINDS in turn (`velocity`: 3 velocities for 4 joints;
# `unstamped`: header.stamp 0), then 1 s of good ones. It prints what it sent, by kind.
ROBOT = """
import json, sys, time, rclpy
from sensor_msgs.msg import JointState
from rclpy.qos import QoSProfile
OFFSET_MS, KINDS, N = float(sys.argv[1]), sys.argv[2].split(",") if sys.argv[2] else [], 30
rclpy.init()
node = rclpy.create_node("edge_robot", namespace="/arm")
pub = node.create_publisher(JointState, "joint_states", QoSProfile(depth=1000))
J, Q = ["base", "shoulder", "elbow", "wrist"], [0.0, 0.3, 1.6, 1.0]
sent = dict.fromkeys(["good", *KINDS], 0)
def send(kind):
    m = JointState()
    t = node.get_clock().now().nanoseconds + int(OFFSET_MS * 1e6)
    if kind != "unstamped":
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(t, 1_000_000_000)
    m.name, m.position, m.velocity = J, Q, [0.0] * (3 if kind == "velocity" else 4)
    pub.publish(m)
    sent[kind] += 1
    time.sleep(0.01)
while pub.get_subscription_count() == 0:
    time.sleep(0.05)
for _ in range(100):
    send("good")
for kind in KINDS:
    for _ in range(N):
        send(kind)
        send("good")
for _ in range(int(float(sys.argv[3]) * 100)):
    send("good")
print(json.dumps(sent), flush=True)
"""


def bridge_run(
    tmp_path, offset_ms: float, kinds: str, *bridge_args, policy: bool = False, robot_s: float = 1.0
):
    """(what the robot sent, the bridge's report, its stderr, its exit status)."""
    report_json = tmp_path / "bridge.json"
    obs, act = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    with RosHost("rtros2e") as host:
        robot = host.python("-c", ROBOT, str(offset_ms), kinds, str(robot_s), stdout=-1, text=True)
        node = (
            host.python(
                "-m",
                "rtinfer.inference.node",
                "--model",
                POLICY,
                "--obs",
                obs,
                "--actions",
                act,
                "--name",
                "policy",
                "--seconds",
                "300",
            )
            if policy
            else None
        )
        bridge = host.python(
            "-m",
            "rtinfer_ros2",
            "--config",
            "rtinfer_ros2:arm.yaml",
            "--set",
            "depth=1000",
            "--model",
            POLICY,
            "--obs",
            obs,
            "--actions",
            act,
            "--report",
            str(report_json),
            *bridge_args,
            stdout=-1,
            stderr=-1,
            text=True,
        )
        try:
            sent = json.loads(robot.communicate(timeout=240)[0])
        finally:
            if bridge.poll() is None:
                bridge.send_signal(signal.SIGINT)
            err = bridge.communicate(timeout=60)[1]
            for p in (node, robot):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGINT)
                    p.wait(30)
    return sent, json.loads(report_json.read_text()), err, bridge.returncode


def said(err: str, kind: str) -> list[str]:
    return [
        ln
        for ln in err.splitlines()
        if ln.startswith("ros2 bridge:") and f"counted as {kind}" in ln
    ]


@pytest.fixture(scope="module")
def velocity_and_unstamped(tmp_path_factory):
    return bridge_run(tmp_path_factory.mktemp("edges"), 0.0, "velocity,unstamped")


def test_a_velocity_of_the_wrong_length_is_refused_counted_and_said_once(velocity_and_unstamped):
    sent, report, err, _ = velocity_and_unstamped
    got = report["ros2"]
    assert got["js_velocity"] == sent["velocity"] == 30, got
    assert len(said(err, "js_velocity")) == 1, err
    assert "3 velocities for 4 joints" in said(err, "js_velocity")[0]
    assert got["joint_states"] == sent["good"] + sent["unstamped"]


def test_an_unstamped_joint_state_is_taken_counted_and_said_once_with_the_fix(
    velocity_and_unstamped,
):
    sent, report, err, _ = velocity_and_unstamped
    assert report["ros2"]["js_unstamped"] == sent["unstamped"] == 30
    line = said(err, "js_unstamped")
    assert len(line) == 1 and "header.stamp" in line[0] and "on arrival" in line[0], err


def test_a_robot_clock_behind_is_counted_and_the_end_line_names_it(tmp_path):
    sent, report, err, code = bridge_run(
        tmp_path, -300.0, "", "--seconds", "6", policy=True, robot_s=8.0
    )
    got, ctl = report["ros2"], report["controller"]
    assert ctl["chunks_accepted"] == 0 and ctl["obs_sent"] > 0  # never moved: safe
    assert got["js_past"] == got["joint_states"] > 0, got
    assert len(said(err, "js_past")) == 1 and "clock" in said(err, "js_past")[0], err
    last = [ln for ln in err.splitlines() if "no action chunk was accepted" in ln]
    assert code == 1 and len(last) == 1 and "ros2.js_past" in last[0], err


def test_the_hold_trajectory_sent_at_the_stop_is_counted(tmp_path):
    report_json, arm_json = tmp_path / "bridge.json", tmp_path / "arm.json"
    obs, act = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    with RosHost("rtros2h") as host:
        arm = host.python(
            "-m",
            "rtinfer_ros2.sim_arm",
            "--report",
            str(arm_json),
            "--ros-args",
            "-r",
            "__ns:=/arm",
        )
        node = host.python(
            "-m",
            "rtinfer.inference.node",
            "--model",
            POLICY,
            "--obs",
            obs,
            "--actions",
            act,
            "--name",
            "policy",
            "--seconds",
            "300",
        )
        bridge = host.python(
            "-m",
            "rtinfer_ros2",
            "--config",
            "rtinfer_ros2:arm.yaml",
            "--model",
            POLICY,
            "--obs",
            obs,
            "--actions",
            act,
            "--set",
            "controller=trajectory_chunk",
            "--set",
            "command=/arm/joint_trajectory_controller/joint_trajectory",
            "--seconds",
            "5",
            "--report",
            str(report_json),
            stdout=-1,
            stderr=-1,
            text=True,
        )
        try:
            err = bridge.communicate(timeout=120)[1]
        finally:
            for p in (bridge, node):
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
                    p.wait(30)
            arm.send_signal(signal.SIGINT)
            arm.wait(30)
    report = json.loads(report_json.read_text())
    ros2, arm_got = report["ros2"], json.loads(arm_json.read_text())
    assert report["controller"]["chunks_accepted"] > 10, err[-2000:]
    assert (
        len(arm_got["trajectories"]) == ros2["commands"] == ros2["trajectories"] + ros2["holds"]
    ), (ros2, len(arm_got["trajectories"]))
    assert ros2["holds"] == report["controller"]["holds"] >= 1
    assert arm_got["trajectories"][-1][3] == 1  # the last one the arm got: the stop's hold
