"""Bad JointState input to the bridge: missing or extra joint names, NaN positions, stamps from
the future and a topic that goes silent are each refused and counted (one line per kind), and
the loop keeps running: the policy's chunks are still followed after them."""

from __future__ import annotations

import json
import signal

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
from tests.ros2_host import RosHost, available  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)

POLICY = "models/zoo/arm-reach-bc"
# A robot publishing JointState at 100 Hz; every 5th message one bad kind in turn; then 0.5 s
# of silence; then good ones again. It prints what it sent, by kind.
ROBOT = """
import json, math, time, rclpy
from sensor_msgs.msg import JointState
from rclpy.qos import QoSProfile
rclpy.init()
node = rclpy.create_node("bad_robot", namespace="/arm")
pub = node.create_publisher(JointState, "joint_states", QoSProfile(depth=1000))
J, Q = ["base", "shoulder", "elbow", "wrist"], [0.0, 0.3, 1.6, 1.0]
sent = dict.fromkeys(["good", "js_names", "js_nan", "js_future"], 0)
def send(kind, i):
    m = JointState()
    t = node.get_clock().now().nanoseconds + (1_000_000_000 if kind == "js_future" else 0)
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(t, 1_000_000_000)
    names, pos = (J, Q) if i % 2 else (J[::-1], Q[::-1])   # any order is fine
    if kind == "js_names":
        names, pos = (names[:3], pos[:3]) if i % 2 else (names + ["gripper"], pos + [0.0])
    if kind == "js_nan":
        pos = [math.nan] + pos[1:]
    m.name, m.position = names, pos
    pub.publish(m)
    sent[kind] += 1
def run(seconds, bad):
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        kind = ["js_names", "js_nan", "js_future"][(i // 5) % 3] if bad and i % 5 == 4 else "good"
        send(kind, i)
        i += 1
        time.sleep(0.01)
while pub.get_subscription_count() == 0:
    time.sleep(0.05)
run(3.0, False)   # the bridge starts, the policy's chunks are followed
run(3.0, True)
time.sleep(0.5)   # silent
run(3.0, False)
print(json.dumps(sent), flush=True)
"""


def test_bad_joint_states_are_refused_counted_and_the_loop_runs_on(tmp_path):
    report_json = tmp_path / "bridge.json"
    obs, act = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    with RosHost("rtros2x") as host:
        robot = host.python("-c", ROBOT, stdout=-1, text=True)
        policy = host.python(
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
            "--set",
            "depth=1000",
            "--model",
            POLICY,
            "--obs",
            obs,
            "--actions",
            act,
            "--seconds",
            "300",
            "--report",
            str(report_json),
            stdout=-1,
            stderr=-1,
            text=True,
        )
        try:
            sent = json.loads(robot.communicate(timeout=240)[0])
        finally:
            for p in (bridge, policy, robot):
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            err = bridge.communicate(timeout=60)[1]
            policy.wait(30)
    report = json.loads(report_json.read_text())
    got, ctl = report["ros2"], report["controller"]
    assert {k: got[k] for k in ("js_names", "js_nan", "js_future")} == {
        k: sent[k] for k in ("js_names", "js_nan", "js_future")
    }
    assert sent["js_names"] >= 10 and got["joint_states"] == sent["good"]
    assert got["js_silent"] >= 1 and ctl["read_faults"] >= 1
    said = [
        ln.split("counted as ")[1].split(";")[0]
        for ln in err.splitlines()
        if ln.startswith("ros2 bridge:")
        and "counted as js_" in ln
        and "counted as js_past" not in ln
    ]  # a late delivery on a loaded host: taken
    assert sorted(said) == ["js_future", "js_names", "js_nan", "js_silent"], err
    assert ctl["chunks_accepted"] > 20
    print(sent, got, {k: ctl[k] for k in ("chunks_accepted", "read_faults", "holds")})
