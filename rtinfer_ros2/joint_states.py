"""The latest sensor_msgs/JointState, checked: what the bridge's ROS thread hands its control
loop.

A message is refused and counted (one line per kind on stderr, the first time) when its names
are not exactly the joints, or its positions not one per name (js_names), a position is not
finite (js_nan), its velocities are neither absent nor one per name (js_velocity), or its
stamp lies more than `future_ns` ahead of this host's clock (js_future). Taken, but counted
and said once: a stamp of 0 (js_unstamped: taken as measured on arrival) and a stamp more
than `past_ns` behind its arrival (js_past: the robot's clock is behind, or the message was
that long on its way; the policy drops such an observation as stale). Names may come in any
order; velocities, when absent or not finite, are differentiated.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .refusals import Refusals
from .refusals import capture_ns as to_monotonic

REFUSALS = ("js_names", "js_nan", "js_velocity", "js_future")
NOTED = ("js_unstamped", "js_past")  # taken, counted, said once


class LatestJointState:
    """on_message() from the ROS thread; copy_into() from the control loop (a short lock)."""

    def __init__(self, joints: list[str], topic: str, future_ns: int, past_ns: int = 100_000_000):
        self.joints, self.topic, self.future_ns, self.past_ns = (
            list(joints),
            topic,
            future_ns,
            past_ns,
        )
        self.counters = {"joint_states": 0}
        self._refuse = Refusals(f"a JointState on {topic}", REFUSALS, self.counters)
        self._note = Refusals(f"a JointState on {topic}", NOTED, self.counters, "took")
        self.refused = self._refuse.refused
        self._lock = threading.Lock()
        self._pos, self._vel = np.zeros(len(joints)), np.zeros(len(joints))
        self._capture_ns = self._recv_ns = 0

    def on_message(self, msg) -> None:
        recv_ns, wall_ns = time.monotonic_ns(), time.time_ns()
        names = list(msg.name)
        if sorted(names) != sorted(self.joints) or len(msg.position) != len(names):
            return self._refuse(
                "js_names",
                f"joints {names} with {len(msg.position)} positions, want exactly {self.joints}",
            )
        order = [names.index(j) for j in self.joints]
        pos = np.asarray(msg.position, np.float64)[order]
        if not np.isfinite(pos).all():
            return self._refuse("js_nan", f"positions {pos.tolist()} are not all finite")
        if len(msg.velocity) not in (0, len(names)):
            return self._refuse(
                "js_velocity",
                f"{len(msg.velocity)} velocities for "
                f"{len(names)} joints: send one per joint, or none (then "
                "they are differentiated)",
            )
        capture_ns = to_monotonic(msg.header.stamp, recv_ns, wall_ns)
        if capture_ns > recv_ns + self.future_ns:
            return self._refuse(
                "js_future",
                f"stamp {(capture_ns - recv_ns) / 1e6:.1f} ms "
                "in the future; check the robot's clock (chrony/NTP)",
            )
        if not (msg.header.stamp.sec or msg.header.stamp.nanosec):
            self._note(
                "js_unstamped",
                "header.stamp is 0, so it is taken as measured on "
                "arrival and the deadline counts from there, not from the measurement; "
                "stamp header.stamp when the joints are read",
            )
        elif recv_ns - capture_ns > self.past_ns:
            self._note(
                "js_past",
                f"stamp {(recv_ns - capture_ns) / 1e6:.1f} ms before its "
                f"arrival (over past_ms, {self.past_ns / 1e6:g}): an observation that "
                "old is stale, and the policy drops it; when every JointState is, the "
                "robot never moves: check the robot's clock against this host's "
                "(chrony/NTP)",
            )
        vel = np.asarray(msg.velocity, np.float64)[order] if len(msg.velocity) else None
        with self._lock:
            if vel is None or not np.isfinite(vel).all():
                dt = (capture_ns - self._capture_ns) / 1e9
                vel = (pos - self._pos) / dt if self._capture_ns and dt > 0 else np.zeros(len(pos))
            self._pos[:], self._vel[:] = pos, vel
            self._capture_ns, self._recv_ns = capture_ns, recv_ns
            self.counters["joint_states"] += 1

    def copy_into(self, pos: np.ndarray, vel: np.ndarray) -> tuple[int, int]:
        """Fill pos and vel with the latest; (its capture ns, its receipt ns), 0 before any."""
        with self._lock:
            pos[:], vel[:] = self._pos, self._vel
            return self._capture_ns, self._recv_ns
