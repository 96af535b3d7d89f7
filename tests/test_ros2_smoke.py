"""The ROS 2 venv talks DDS inside a network namespace: the simulated arm's JointState reaches
another process, and that process's position commands reach the arm (both ways)."""

from __future__ import annotations

import json
import signal

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
from tests.ros2_host import RosHost, available  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)

CLIENT = """
import sys, time, rclpy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
rclpy.init()
node = rclpy.create_node("client", namespace="/arm")
seen = []
node.create_subscription(JointState, "joint_states", lambda m: seen.append(list(m.name)), 10)
pub = node.create_publisher(Float64MultiArray, "forward_position_controller/commands", 10)
end = time.monotonic() + 60
while len(seen) < 50 and time.monotonic() < end:
    rclpy.spin_once(node, timeout_sec=0.1)
for _ in range(100):
    pub.publish(Float64MultiArray(data=[0.1, 0.2, 0.3, 0.4]))
    rclpy.spin_once(node, timeout_sec=0.01)
print(len(seen), seen[-1] if seen else None, flush=True)
"""


def test_joint_state_and_commands_cross_between_two_processes(tmp_path):
    with RosHost("rtros2s") as host:
        arm = host.python(
            "-m",
            "rtinfer_ros2.sim_arm",
            "--report",
            str(tmp_path / "arm.json"),
            "--ros-args",
            "-r",
            "__ns:=/arm",
        )
        try:
            out = host.python("-c", CLIENT, stdout=-1, text=True).communicate(timeout=120)[0]
        finally:
            arm.send_signal(signal.SIGINT)
            arm.wait(30)
        seen, names = out.split(" ", 1)
        assert int(seen) >= 50 and "'base', 'shoulder', 'elbow', 'wrist'" in names
        report = json.loads((tmp_path / "arm.json").read_text())
        assert report["applied"] and report["refused"] == 0
        assert all(c[1:] == [0.1, 0.2, 0.3, 0.4] for c in report["applied"])
        assert report["pos"] == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=0.05)
