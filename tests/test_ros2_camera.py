"""Camera frames from ROS 2, end to end in a network namespace: the plain rclpy arm also
publishes a small camera topic (bgr8 Image, or jpeg CompressedImage), the bridge subscribes
to it (its `cameras:`), and a tiny real ONNX camera policy (tests/ros2_camera_policy.py)
sends the arm's base to mean(red) / 255: the base gets there, the bridge counted the frames,
and the policy node refused none (frame_bad, frame_stale: 0)."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
pytest.importorskip("onnx", reason="the ROS 2 venv (make test-ros2) builds its camera policy")
from rtinfer.transport.bus import Subscriber  # noqa: E402
from tests import ros2_camera_policy as cp  # noqa: E402
from tests.ros2_host import RosHost, available, read, stop, wait_for  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)

RED = 102  # the frame's red: the base goes to 0.4 rad
TOPICS = {"bgr8": "/arm/camera/image_raw", "jpeg": "/arm/camera/image_raw/compressed"}


@pytest.mark.parametrize("encoding", list(TOPICS))
def test_the_policy_sees_the_ros_camera_and_the_arm_goes_where_it_says(tmp_path, encoding):
    model = tmp_path / "camera-policy"
    cp.build(model)
    arm_json, bridge_json = tmp_path / "arm.json", tmp_path / "bridge.json"
    obs, act = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    camera = {"topic": TOPICS[encoding], "shape": [8, 8, 3], "compressed": encoding == "jpeg"}
    health = Subscriber(act, ["health"])
    with RosHost("rtros2i") as host:
        arm = host.python(
            "-m",
            "rtinfer_ros2.sim_arm",
            "--report",
            str(arm_json),
            "--camera-size",
            "8",
            "8",
            "--camera-rgb",
            str(RED),
            "30",
            "200",
            "--camera-encoding",
            encoding,
            "--ros-args",
            "-r",
            "__ns:=/arm",
        )
        policy = host.python(
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(model),
            "--obs",
            obs,
            "--actions",
            act,
            "--name",
            "policy",
            "--seconds",
            "300",
            "--health-hz",
            "5",
        )
        bridge = host.python(
            "-m",
            "rtinfer_ros2",
            "--config",
            "rtinfer_ros2:arm.yaml",
            "--model",
            str(model),
            "--obs",
            obs,
            "--actions",
            act,
            "--seconds",
            "300",
            "--report",
            str(bridge_json),
            "--set",
            "observe=null",
            "--set",
            f"cameras={json.dumps({'wrist': camera})}",
        )
        try:
            wait_for(
                "the base at mean(red) / 255",
                lambda: (r := read(arm_json)) and abs(r["pos"][0] - cp.base_rad(RED)) < 0.01,
            )
            counters, end = None, time.monotonic() + 20
            while counters is None and time.monotonic() < end:
                env = health.recv(200)
                if env is not None and env.body.get("node") == "policy":
                    counters = env.body["counters"]
        finally:
            stop(policy, bridge, arm)
            health.close()
    ros2 = json.loads(bridge_json.read_text())["ros2"]
    assert ros2["cameras"]["wrist"]["frames"] > 10, ros2
    assert ros2["cameras"]["wrist"]["frame_bad"] == ros2["cameras"]["wrist"]["frame_future"] == 0
    assert counters is not None, "no health from the policy node"
    assert counters["frame_bad"] == counters["frame_stale"] == 0, counters
    assert counters["frame_missing"] == counters["frame_unknown"] == 0, counters
    print(
        "bridge",
        ros2["cameras"],
        "| node",
        {k: v for k, v in counters.items() if k.startswith(("frame", "obs"))},
    )
