"""What the bridge sends the ROS 2 robot's controller, one object per controller type, each
with the same surface: tick(cmd) every control tick, chunk(waypoints, due_ns, pos, now_ns)
once per accepted chunk, hold(pos, now_ns) when the controller stops following chunks. Each
returns the message to publish, or None; the bridge publishes it (bridge.py).

  forward           std_msgs/Float64MultiArray, the tick's position setpoint (already limited,
                    docs/robots.md section 5) at the control rate, for a
                    forward_command_controller. Hold: the braking reference, sent on per tick.
  trajectory        trajectory_msgs/JointTrajectory per tick: one point (the tick's position
                    and reference velocity) due one tick ahead; each replaces the last.
  trajectory_chunk  trajectory_msgs/JointTrajectory per chunk, for a joint_trajectory_controller
                    that interpolates itself: header.stamp = when the controller handed the
                    chunk over, found fresh (on the ROS clock), point i at time_from_start = the
                    waypoint's due time (capture + start + i * period) after it. Nothing per
                    tick. Hold: one point, the measured position at zero velocity, one tick
                    after receipt (header.stamp 0: the controller's own clock on receipt, so
                    no delay on the way makes it late).

Limits on trajectory_chunk: the waypoints come limited by the controller (clipped into the
workspace: controllers.limits, via the on_chunk hook); here each segment, from the measured
position to point 0 and between points, is bounded by the axes' vel_limit (clipped, counted
as traj_vel_clamps); a waypoint due less than lead_ns ahead is left out (it would reach the
controller past due; counted as traj_points_dropped). Between the points the
joint_trajectory_controller's own interpolation and its joint limits rule. Not thread-safe:
the control loop's thread.
"""

from __future__ import annotations

import time

import numpy as np

from controllers.config import ControlConfig

TYPES = ("forward", "trajectory", "trajectory_chunk")
HOLD_HOW = {
    "forward": "braking to a stop, then the last position, sent at the control rate",
    "trajectory": "braking to a stop, then a hold trajectory (the held position, zero "
    "velocity), sent at the control rate",
    "trajectory_chunk": "one hold trajectory (the measured position, zero velocity)",
}


def _duration(msg, ns: int) -> None:
    msg.sec, msg.nanosec = divmod(int(ns), 1_000_000_000)


class Forward:
    message = "Float64MultiArray"  # the type it sends

    def __init__(self, msgs, control: ControlConfig, joints: list[str], ros_now_ns, lead_ns: int):
        self.msg, self.counters = msgs.Float64MultiArray(), {}

    def tick(self, cmd):
        self.msg.data = cmd.value.tolist()
        return self.msg

    def chunk(self, waypoints, due_ns, pos, now_ns):
        return None

    def hold(self, pos, now_ns):
        return None


class TickTrajectory:
    message = "JointTrajectory"

    def __init__(self, msgs, control: ControlConfig, joints: list[str], ros_now_ns, lead_ns: int):
        self.msg = msgs.JointTrajectory(joint_names=joints, points=[msgs.JointTrajectoryPoint()])
        self.counters = {}
        _duration(self.msg.points[0].time_from_start, 1e9 / control.rate_hz)

    def tick(self, cmd):
        point = self.msg.points[0]
        point.positions, point.velocities = cmd.value.tolist(), cmd.ref_vel.tolist()
        return self.msg

    chunk, hold = Forward.chunk, Forward.hold


class ChunkTrajectory:
    message = "JointTrajectory"
    """ros_now_ns(): the ROS clock (ns) the robot's controller reads header stamps on.
    lead_ns: a waypoint due sooner than this after the chunk is handed over is left out."""

    def __init__(self, msgs, control: ControlConfig, joints: list[str], ros_now_ns, lead_ns: int):
        self.msgs, self.joints, self.n, self.ros_now_ns = msgs, joints, control.n, ros_now_ns
        self.tick_ns, self.lead_ns = int(1e9 / control.rate_hz), int(lead_ns)
        self.vel_limit = np.array(control.axis("vel_limit"), float)
        self.counters = dict.fromkeys(
            ("trajectories", "traj_vel_clamps", "traj_points_dropped", "traj_past_due"), 0
        )

    def tick(self, cmd):
        return None

    def _trajectory(self, now_ns: int, positions, due_ns, velocities=None):
        """A JointTrajectory stamped at now_ns (monotonic, moved onto the ROS clock; None:
        stamp 0, i.e. from receipt), point i due at due_ns[i] (monotonic)."""
        m = self.msgs
        msg = m.JointTrajectory(joint_names=self.joints)
        if now_ns is None:
            now_ns = time.monotonic_ns()
        else:
            _duration(msg.header.stamp, now_ns + self.ros_now_ns() - time.monotonic_ns())
        for p, due in zip(positions, due_ns):
            point = m.JointTrajectoryPoint(positions=p)
            if velocities is not None:
                point.velocities = velocities
            _duration(point.time_from_start, due - now_ns)
            msg.points.append(point)
        return msg

    def chunk(self, waypoints, due_ns, pos, now_ns):
        keep = due_ns >= now_ns + self.lead_ns
        self.counters["traj_points_dropped"] += int(len(keep) - keep.sum())
        if not keep.any():
            self.counters["traj_past_due"] += 1
            return None
        w, due = waypoints[keep, : self.n].copy(), due_ns[keep]
        prev, prev_ns = np.asarray(pos, float), now_ns
        for i in range(len(w)):  # each segment within vel_limit, from the measured position
            reach = self.vel_limit * ((due[i] - prev_ns) * 1e-9)
            step = np.clip(w[i] - prev, -reach, reach)
            self.counters["traj_vel_clamps"] += int(np.count_nonzero(step != w[i] - prev))
            w[i] = prev = prev + step
            prev_ns = due[i]
        self.counters["trajectories"] += 1
        return self._trajectory(now_ns, w.tolist(), due.tolist())

    def hold(self, pos, now_ns):
        return self._trajectory(
            None, [list(map(float, pos))], [now_ns + self.tick_ns], velocities=[0.0] * self.n
        )


KINDS = {"forward": Forward, "trajectory": TickTrajectory, "trajectory_chunk": ChunkTrajectory}
