"""The latest sensor_msgs/JointState, checked: what the bridge's ROS thread hands its control
loop.

A message is refused and counted (one line per kind on stderr, the first time) when its names
are not exactly the joints (one missing, one extra: js_names), a position is not finite
(js_nan), or its stamp lies more than `future_ns` ahead of this host's clock (js_future).
Names may come in any order; velocities, when absent or not finite, are differentiated.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

REFUSALS = ("js_names", "js_nan", "js_future")


class LatestJointState:
    """on_message() from the ROS thread; copy_into() from the control loop (a short lock)."""

    def __init__(self, joints: list[str], topic: str, future_ns: int):
        self.joints, self.topic, self.future_ns = list(joints), topic, future_ns
        self.counters = dict.fromkeys(("joint_states",) + REFUSALS, 0)
        self._lock = threading.Lock()
        self._pos, self._vel = np.zeros(len(joints)), np.zeros(len(joints))
        self._capture_ns = self._recv_ns = 0

    def refused(self) -> dict[str, int]:
        return {k: self.counters[k] for k in REFUSALS}

    def _refuse(self, kind: str, why: str) -> None:
        self.counters[kind] += 1
        if self.counters[kind] == 1:
            print(f"ros2 bridge: refused a JointState on {self.topic}: {why} (counted as "
                  f"{kind}; said once)", file=sys.stderr, flush=True)

    def on_message(self, msg) -> None:
        recv_ns, wall_ns = time.monotonic_ns(), time.time_ns()
        names = list(msg.name)
        if sorted(names) != sorted(self.joints) or len(msg.position) != len(names):
            return self._refuse("js_names", f"joints {names} with {len(msg.position)} "
                                f"positions, want exactly {self.joints}")
        order = [names.index(j) for j in self.joints]
        pos = np.asarray(msg.position, np.float64)[order]
        if not np.isfinite(pos).all():
            return self._refuse("js_nan", f"positions {pos.tolist()} are not all finite")
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        # The stamp is on the sender's ROS clock (wall time); moved onto this monotonic clock.
        capture_ns = stamp_ns - (wall_ns - recv_ns) if stamp_ns else recv_ns
        if capture_ns > recv_ns + self.future_ns:
            return self._refuse("js_future", f"stamp {(capture_ns - recv_ns) / 1e6:.1f} ms "
                                "in the future; check the robot's clock (chrony/NTP)")
        vel = np.asarray(msg.velocity, np.float64)[order] \
            if len(msg.velocity) == len(names) else None
        with self._lock:
            if vel is None or not np.isfinite(vel).all():
                dt = (capture_ns - self._capture_ns) / 1e9
                vel = (pos - self._pos) / dt if self._capture_ns and dt > 0 \
                    else np.zeros(len(pos))
            self._pos[:], self._vel[:] = pos, vel
            self._capture_ns, self._recv_ns = capture_ns, recv_ns
            self.counters["joint_states"] += 1

    def copy_into(self, pos: np.ndarray, vel: np.ndarray) -> tuple[int, int]:
        """Fill pos and vel with the latest; (its capture ns, its receipt ns), 0 before any."""
        with self._lock:
            pos[:], vel[:] = self._pos, self._vel
            return self._capture_ns, self._recv_ns
