"""A simulated arm as a plain ROS 2 node, written the way a ROS user writes one: the robot the
bridge's tests and docs/ros2.md's example drive.

    python -m rtinfer_ros2.sim_arm [--joints base shoulder elbow wrist] [--rate-hz 200]
        [--tau-s 0.05] [--report PATH] [--camera-size H W [--camera-rgb R G B]
        [--camera-encoding rgb8|bgr8|jpeg] [--camera-hz 30]] [--ros-args -r __ns:=/arm]

It publishes sensor_msgs/JointState on `joint_states` at --rate-hz, stamped with the node's
clock, and executes position commands: std_msgs/Float64MultiArray on
`forward_position_controller/commands` (a forward_command_controller's topic), one position
per joint in --joints order, or trajectory_msgs/JointTrajectory on
`joint_trajectory_controller/joint_trajectory` as a joint_trajectory_controller takes it:
each replaces the last; its points are due at header.stamp (0: on receipt) +
time_from_start on the node's clock, and the commanded position runs linearly from where the
arm was on receipt through each point at its time, then stays at the last (joints matched by
name). Each joint follows its commanded position as a first-order lag (time constant
--tau-s). It writes --report (JSON) twice a second and on SIGINT/SIGTERM: every command it
applied with its monotonic receipt time (`applied`: [t_ns, q0, q1, ...], a trajectory's last
point), every trajectory (`trajectories`: [receipt ns, first point's due ns, its header stamp (0:
none), all on the node's clock; points]), those whose first point was already past due on receipt
(`stale_trajectories`), the commands it refused (`refused`: wrong length, not finite) and
its positions (`pos`). With --camera-size it is also a camera: a frame of one colour
(--camera-rgb) as sensor_msgs/Image on `camera/image_raw` (rgb8 or bgr8), or jpeg as
sensor_msgs/CompressedImage on `camera/image_raw/compressed`, stamped with the node's clock.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

JOINTS = ("base", "shoulder", "elbow", "wrist")
READY = (0.0, 0.3, 1.6, 1.0)  # the reach arm's rest pose (examples/arm_reach/sim.py)


class SimArm(Node):
    def __init__(self, joints, start, rate_hz: float, tau_s: float, report: str | None = None):
        super().__init__("sim_arm")
        self.joints = list(joints)
        self.pos, self.vel, self.goal = list(start), [0.0] * len(joints), list(start)
        self.tau_s = tau_s
        self.applied: list[list[float]] = []
        self.trajectories: list[list[int]] = []
        self.refused = self.stale = 0
        self.plan: list[tuple[int, list[float]]] = []  # (due ns on the node's clock, position)
        self.js_pub = self.create_publisher(JointState, "joint_states", 10)
        self.create_subscription(
            Float64MultiArray, "forward_position_controller/commands", self.on_command, 10
        )
        self.create_subscription(
            JointTrajectory, "joint_trajectory_controller/joint_trajectory", self.on_trajectory, 10
        )
        self.last = time.monotonic()
        self.create_timer(1.0 / rate_hz, self.step)
        self.report = report
        if report:
            self.create_timer(0.5, self.write_report)

    def camera(self, size, rgb, encoding: str, rate_hz: float) -> None:
        """Publish a frame of colour `rgb`, `size` (H, W), at rate_hz."""
        h, w = size
        pixels = bytes(rgb[::-1] if encoding == "bgr8" else rgb) * (h * w)
        if encoding == "jpeg":
            import io

            from PIL import Image as Picture

            buf = io.BytesIO()
            Picture.frombytes("RGB", (w, h), pixels).save(buf, format="JPEG", quality=95)
            frame = CompressedImage(format="jpeg", data=buf.getvalue())
            pub = self.create_publisher(CompressedImage, "camera/image_raw/compressed", 10)
        else:
            frame = Image(height=h, width=w, encoding=encoding, step=3 * w, data=pixels)
            pub = self.create_publisher(Image, "camera/image_raw", 10)

        def publish():
            frame.header.stamp = self.get_clock().now().to_msg()
            pub.publish(frame)

        self.create_timer(1.0 / rate_hz, publish)

    def write_report(self) -> None:
        with open(self.report + ".tmp", "w") as f:
            json.dump(
                {
                    "joints": self.joints,
                    "applied": self.applied,
                    "refused": self.refused,
                    "trajectories": self.trajectories,
                    "stale_trajectories": self.stale,
                    "pos": self.pos,
                },
                f,
            )
        os.replace(self.report + ".tmp", self.report)

    def on_trajectory(self, msg: JointTrajectory) -> None:
        now_ns = self.get_clock().now().nanoseconds
        names = list(msg.joint_names)
        if (
            not msg.points
            or sorted(names) != sorted(self.joints)
            or any(len(p.positions) != len(self.joints) for p in msg.points)
        ):
            self.refused += 1
            return
        order = [names.index(j) for j in self.joints]
        stamped = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        stamp_ns = stamped or now_ns
        plan = [
            (
                stamp_ns + p.time_from_start.sec * 1_000_000_000 + p.time_from_start.nanosec,
                [p.positions[k] for k in order],
            )
            for p in msg.points
        ]
        if not self.apply(plan[-1][1]):
            return
        self.plan = [(now_ns, list(self.pos))] + plan
        self.trajectories.append([now_ns, plan[0][0], stamped, len(plan)])
        self.stale += plan[0][0] < now_ns

    def on_command(self, msg: Float64MultiArray) -> None:
        if self.apply(list(msg.data)):
            self.plan = []

    def apply(self, q: list[float]) -> bool:
        if len(q) != len(self.joints) or not all(math.isfinite(v) for v in q):
            self.refused += 1
            return False
        self.goal = q
        self.applied.append([time.monotonic_ns()] + q)
        return True

    def follow_plan(self) -> None:
        """The commanded position on the trajectory now: linear between its points."""
        now_ns = self.get_clock().now().nanoseconds
        while len(self.plan) > 1 and self.plan[1][0] <= now_ns:
            self.plan.pop(0)
        if len(self.plan) == 1:
            self.goal = self.plan[0][1]
        elif self.plan:
            (t0, q0), (t1, q1) = self.plan[0], self.plan[1]
            s = (now_ns - t0) / (t1 - t0) if t1 > t0 and now_ns > t0 else 0.0
            self.goal = [a + s * (b - a) for a, b in zip(q0, q1)]

    def step(self) -> None:
        self.follow_plan()
        now = time.monotonic()
        dt, self.last = now - self.last, now
        k = 1.0 - math.exp(-dt / self.tau_s)
        for i, g in enumerate(self.goal):
            dq = (g - self.pos[i]) * k
            self.pos[i] += dq
            self.vel[i] = dq / dt if dt > 0 else 0.0
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name, msg.position, msg.velocity = self.joints, self.pos, self.vel
        self.js_pub.publish(msg)


def main(argv: list[str] | None = None) -> int:
    args = rclpy.utilities.remove_ros_args(sys.argv if argv is None else ["sim_arm"] + argv)
    ap = argparse.ArgumentParser(
        prog="python -m rtinfer_ros2.sim_arm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--joints", nargs="+", default=list(JOINTS))
    ap.add_argument(
        "--start",
        nargs="+",
        type=float,
        default=None,
        help="initial positions (default: the reach arm's rest pose)",
    )
    ap.add_argument("--rate-hz", type=float, default=200.0, help="JointState rate")
    ap.add_argument("--tau-s", type=float, default=0.05, help="each joint's time constant")
    ap.add_argument("--report", default=None, help="write the applied commands here (JSON)")
    ap.add_argument(
        "--camera-size",
        nargs=2,
        type=int,
        default=None,
        metavar=("H", "W"),
        help="also publish camera frames of this size",
    )
    ap.add_argument("--camera-rgb", nargs=3, type=int, default=[102, 0, 0])
    ap.add_argument("--camera-encoding", choices=["rgb8", "bgr8", "jpeg"], default="rgb8")
    ap.add_argument("--camera-hz", type=float, default=30.0)
    a = ap.parse_args(args[1:])
    start = a.start or [READY[i] if i < len(READY) else 0.0 for i in range(len(a.joints))]
    rclpy.init(args=sys.argv if argv is None else ["sim_arm"] + argv)
    node = SimArm(a.joints, start, a.rate_hz, a.tau_s, a.report)
    if a.camera_size:
        node.camera(a.camera_size, a.camera_rgb, a.camera_encoding, a.camera_hz)
    signal.signal(signal.SIGTERM, lambda *_: rclpy.try_shutdown())  # as SIGINT, on any distro
    print("sim_arm: ready", flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if a.report:
            node.write_report()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
