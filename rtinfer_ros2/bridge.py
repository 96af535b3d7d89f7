"""The ROS 2 bridge as a robot driver: a controllers HardwareInterface on rclpy.

controllers.run ticks it like any robot (docs/robots.md), so every guarantee there holds
unchanged across the bridge: a chunk whose observation is older than the deadline is never
applied, and with no fresh chunk the controller holds. read() is the latest JointState,
observe() the policy's observation from it (stamped with the JointState's own capture stamp),
write() the tick's command sent on to the ROS 2 robot. rclpy spins in a thread of this process
(its own context, no signal handlers: controllers.run owns SIGINT/SIGTERM).

Controller types (`controller:`, commands.py): `forward` (Float64MultiArray setpoints at the
control rate), `trajectory` (a one-point JointTrajectory per tick), `trajectory_chunk` (each
accepted chunk once, as one JointTrajectory whose points carry the waypoints' due times;
the controllers' on_chunk hook hands it over, so never a stale one). When the controller
stops following chunks (its on_hold: the watchdog, a late chunk, safe_hold, a fault) the
robot holds: per tick the braking reference goes on being sent; trajectory_chunk sends one
hold trajectory. Each hold is counted (holds, equal to the controller's) and the first said
in one line.

A JointState is refused and counted when it is not one of the joints' (joint_states.py), and
counted when its stamp is 0 or further behind than past_ms; a
topic silent for longer than `silent_ms` makes read() fail (HardwareFault): the
controller holds and counts it (read_faults), and the bridge counts each silence (js_silent).
Uses rclpy's stable API only (Humble, Jazzy, Kilted).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np

from controllers.config import ControlConfig
from controllers.hardware import HardwareFault, Observation, RobotState
from rtinfer.launch.entry import EntryError, resolve

from .commands import HOLD_HOW, KINDS
from .config import ROS2RobotConfig
from .figures import Figures
from .images import LatestImage, jpeg_decoder
from .joint_states import LatestJointState
from .refusals import say

INSTALL = (
    "ROS 2 (rclpy) is not installed: source your ROS 2 setup.bash (Humble, Jazzy or "
    "later), or `pip install rtinfer[ros2]` (ROS 2 Kilted wheels from PyPI)"
)


def import_rclpy():
    """rclpy, and the message types by name; ValueError (one line: how to install) without
    them."""
    try:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
    except ImportError:
        raise ValueError(INSTALL) from None
    return rclpy, SimpleNamespace(
        JointState=JointState,
        Float64MultiArray=Float64MultiArray,
        JointTrajectory=JointTrajectory,
        JointTrajectoryPoint=JointTrajectoryPoint,
        Image=Image,
        CompressedImage=CompressedImage,
        DiagnosticArray=DiagnosticArray,
        DiagnosticStatus=DiagnosticStatus,
        KeyValue=KeyValue,
    )


def camera_configs(cameras: dict | None) -> dict[str, dict]:
    """The `cameras:` entries, checked: name -> {topic, shape (H, W, 3), decode (a jpeg
    decoder, or None for raw images)}; ValueError says what is wrong and the fix."""
    out = {}
    for name, c in (cameras or {}).items():
        c = c if isinstance(c, dict) else {}
        shape, extra = c.get("shape"), set(c) - {"topic", "shape", "compressed"}
        if (
            not isinstance(c.get("topic"), str)
            or extra
            or not (
                isinstance(shape, list)
                and len(shape) == 3
                and shape[2] == 3
                and all(isinstance(d, int) and d > 0 for d in shape)
            )
        ):
            raise ValueError(
                f"ros2 bridge: camera {name!r}: give it as {{topic: TOPIC, shape: "
                f"[H, W, 3], compressed: false}}, got {cameras[name]!r}"
            )
        decode = jpeg_decoder() if c.get("compressed") else None
        if c.get("compressed") and decode is None:
            raise ValueError(
                f"ros2 bridge: camera {name!r} is compressed, and no jpeg decoder "
                "is installed: pip install pillow (or take the raw Image topic)"
            )
        out[name] = {"topic": c["topic"], "shape": shape, "decode": decode}
    return out


class ROS2Robot:
    """N joints of a ROS 2 robot, in the robot file's axis order (docs/ros2.md).

    ROS2Robot(control, config): config is a ROS2RobotConfig (config.py: the topics, joints,
    QoS, controller type, observation, cameras, /diagnostics; each setting's meaning is
    there). ROS2Robot(control, **hardware): the robot file's `hardware:` keys, as
    controllers.run passes them, read by ROS2RobotConfig.from_hardware. Every observation
    carries each camera's newest frame (images.py), or waits for one no older than
    frame_silent_ms. Blocks up to config.wait_s for the first JointState (ValueError if none
    comes)."""

    def __init__(
        self, control: ControlConfig, config: ROS2RobotConfig | None = None, /, **hardware
    ):
        if config is not None and hardware:
            raise ValueError(
                f"ros2 bridge: give a ROS2RobotConfig or the hardware keys "
                f"{sorted(hardware)}, not both"
            )
        cfg = self.config = config or ROS2RobotConfig.from_hardware(hardware)
        rclpy, msgs = import_rclpy()
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions

        self.joints = list(cfg.joints or [a.name for a in control.axes])
        if len(self.joints) != control.n:
            raise ValueError(
                f"ros2 bridge: joints {self.joints} must be one per axis ({control.n})"
            )
        try:
            self._observe = resolve(cfg.observe) if cfg.observe else None
        except EntryError as e:
            raise ValueError(f"ros2 bridge: observe {cfg.observe!r}: {e}") from None
        self._next_obs_ns = 0
        self.latest = LatestJointState(
            self.joints, cfg.joint_states, int(cfg.future_ms * 1e6), int(cfg.past_ms * 1e6)
        )
        self.counters = dict.fromkeys(("commands", "holds", "js_silent", "obs_no_frame"), 0)
        self.cameras = [
            LatestImage(
                name,
                c["topic"],
                c["shape"],
                int(cfg.future_ms * 1e6),
                int(cfg.frame_silent_ms * 1e6),
                c["decode"],
            )
            for name, c in camera_configs(cfg.cameras).items()
        ]
        self._following, self._state_capture_ns, self._silent = False, 0, False
        self.state = RobotState.zeros(control.n)
        self._ctx = rclpy.Context()
        rclpy.init(context=self._ctx, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(cfg.node, context=self._ctx)
        qos = QoSProfile(
            depth=cfg.depth,
            reliability=ReliabilityPolicy.BEST_EFFORT
            if cfg.reliability == "best_effort"
            else ReliabilityPolicy.RELIABLE,
        )
        self.node.create_subscription(
            msgs.JointState, cfg.joint_states, self.latest.on_message, qos
        )
        camera_qos = QoSProfile(depth=2, reliability=ReliabilityPolicy.BEST_EFFORT)
        for cam in self.cameras:  # best effort: matches a reliable publisher too
            self.node.create_subscription(
                msgs.CompressedImage if cam.decode_jpeg else msgs.Image,
                cam.topic,
                cam.on_compressed if cam.decode_jpeg else cam.on_image,
                camera_qos,
            )
        clock = self.node.get_clock()
        self.out = KINDS[cfg.controller](
            msgs, control, self.joints, lambda: clock.now().nanoseconds, int(cfg.lead_ms * 1e6)
        )
        self._pub = self.node.create_publisher(getattr(msgs, self.out.message), cfg.command, qos)
        self.figures = (
            Figures(
                self.node,
                msgs,
                list(cfg.listen or []),
                cfg.diagnostics_hz,
                lambda: self.report()["ros2"],
                cfg.node,
            )
            if cfg.diagnostics_hz
            else None
        )
        self._executor = SingleThreadedExecutor(context=self._ctx)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="rclpy", daemon=True)
        self._thread.start()
        end = time.monotonic() + cfg.wait_s
        while self.latest.counters["joint_states"] == 0 and time.monotonic() < end:
            time.sleep(0.01)
        if self.latest.counters["joint_states"] == 0:
            self.close()
            raise ValueError(
                f"ros2 bridge: no valid JointState on {cfg.joint_states} within "
                f"{cfg.wait_s:g} s (refused: {self.latest.refused()}); start the "
                "robot, or check the topic, its namespace and QoS"
            )

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # the context shut down under it (close())
            pass

    def read(self) -> RobotState:
        now_ns = time.monotonic_ns()
        capture_ns, recv_ns = self.latest.copy_into(self.state.pos, self.state.vel)
        self.state.t_ns = self._state_capture_ns = capture_ns
        silent = now_ns - recv_ns > self.config.silent_ms * 1e6
        topic = self.config.joint_states
        if silent and not self._silent:
            self.counters["js_silent"] += 1
            if self.counters["js_silent"] == 1:
                say(
                    f"{topic} silent for over {self.config.silent_ms:g} ms: holding "
                    "(counted as js_silent; said once)"
                )
        self._silent = silent
        if silent:
            raise HardwareFault(f"no JointState on {topic} for {(now_ns - recv_ns) / 1e6:.0f} ms")
        return self.state

    def observe(self, state: RobotState, now_ns: int) -> Observation | None:
        if now_ns < self._next_obs_ns:
            return None
        period_ns = int(1e9 / self.config.obs_hz)
        late = now_ns - self._next_obs_ns >= period_ns  # the first, or after a fault
        self._next_obs_ns = (now_ns if late else self._next_obs_ns) + period_ns
        if self._observe is None:
            values = {"joints": np.concatenate([state.pos, state.vel]).astype(np.float32)}
        else:
            values = self._observe(
                state.pos.copy(), state.vel.copy(), **(self.config.observe_args or {})
            )
        frames = {}
        for cam in self.cameras:
            frames[cam.camera] = frame = cam.take(now_ns)
            if frame is None:  # none yet, or the camera fell silent: this period waits
                self.counters["obs_no_frame"] += 1
                return None
        return Observation(self._state_capture_ns, values, frames=frames)

    def _send(self, msg) -> None:
        if msg is not None:
            self._pub.publish(msg)
            self.counters["commands"] += 1

    def write(self, cmd) -> None:
        self._send(self.out.tick(cmd))

    def on_chunk(self, waypoints: np.ndarray, due_ns: np.ndarray, now_ns: int) -> None:
        """A chunk committed by the controller, fresh at now_ns (controllers.hardware)."""
        self._send(self.out.chunk(waypoints, due_ns, self.state.pos, now_ns))
        self._following = True

    def on_hold(self, now_ns: int) -> None:
        """The controller stopped following chunks: the robot holds (counted, said once)."""
        self._following = False
        self._send(self.out.hold(self.state.pos, time.monotonic_ns()))
        self.counters["holds"] += 1
        if self.counters["holds"] == 1:
            say(
                f"no fresh chunk: the robot holds: {HOLD_HOW[self.config.controller]} (counted "
                "as holds; said once)"
            )

    def report(self) -> dict:
        cameras = {cam.camera: dict(cam.counters) for cam in self.cameras}
        figures = {"diagnostics_errors": self.figures.errors} if self.figures else {}
        return {
            "ros2": {
                **self.latest.counters,
                **self.counters,
                **self.out.counters,
                **figures,
                **({"cameras": cameras} if cameras else {}),
            }
        }

    def close(self) -> None:
        if self._following:  # a robot that executes chunks itself is not left on the last one
            self._send(self.out.hold(self.state.pos, time.monotonic_ns()))
        self._executor.shutdown()
        self._thread.join(5)  # the ROS thread is done with the figures' socket
        if self.figures is not None:
            self.figures.close()
        self.node.destroy_node()
        self._ctx.try_shutdown()
