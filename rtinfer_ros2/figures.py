"""rtinfer's own figures on ROS 2: diagnostic_msgs/DiagnosticArray on /diagnostics, for
`ros2 topic echo`, rqt_runtime_monitor and Foxglove's Diagnostics panel.

Published by a timer of the bridge's ROS thread at `hz` (1-10), never from the control loop:
each time it drains what the run's nodes said on the bus since the last (`listen`: the
controller's trace and health on the bridge's own obs endpoint, the policy's health on the
actions endpoint, the monitor's on the control endpoint) and reads the bridge's counters.
The statuses (values are strings, as DiagnosticStatus has them):
  rtinfer/cycles  the cycles since the last publish: e2e_last_ms, e2e_p50_ms, e2e_max_ms
                  (NaN when none), window_cycles; and in all: cycles, misses (trace records
                  of a late chunk), budget_level (the policy's, -1 before its first health).
                  WARN while the window has a miss.
  rtinfer/bridge  the bridge's counters (its report's ros2 section; cameras as CAMERA.KEY)
  NODE            each node heard: its last health (state, counters, gauges), as the MCAP
                  recording's /diagnostics has it. OK while running, else WARN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rtinfer.monitor.stages import is_late
from rtinfer.transport.bus import Subscriber

from .refusals import say

DRAIN_MAX = 10_000  # messages per publish at most (a flood cannot starve the ROS thread)
RUNNING = ("run", "ok", "ready")


def connectable(endpoint: str) -> str:
    """A bound endpoint as one to connect to on this host (tcp://*:N -> tcp://127.0.0.1:N)."""
    return endpoint.replace("://*:", "://127.0.0.1:").replace("://0.0.0.0:", "://127.0.0.1:")


def flat(counters: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in counters.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


class Figures:
    """node: the bridge's rclpy node; msgs: the message types (DiagnosticArray, ...);
    counters(): the bridge's counters; robot: its name (hardware_id)."""

    def __init__(
        self, node, msgs, listen: list[str], hz: float, counters: Callable[[], dict], robot: str
    ):
        if not 0 < hz <= 10:
            raise ValueError(
                f"ros2 bridge: diagnostics_hz {hz} must be in (0, 10]: figures "
                "for people and dashboards, not the control loop"
            )
        self.msgs, self.counters, self.robot = msgs, counters, robot
        self.sub = (
            Subscriber([connectable(e) for e in listen], ["trace", "health"]) if listen else None
        )
        self.pub = node.create_publisher(msgs.DiagnosticArray, "/diagnostics", 10)
        self.clock = node.get_clock()
        self.health: dict[str, tuple[str, dict]] = {}  # node -> (its src, its last health)
        self.window_ms: list[float] = []
        self.cycles = self.misses = 0
        self.errors = 0
        self.timer = node.create_timer(1.0 / hz, self._on_timer)

    def _on_timer(self) -> None:
        # An exception here would end the ROS thread, and with it the JointState the
        # control loop reads: a figure that cannot be made is counted and said, no more.
        try:
            self.publish()
        except (KeyError, TypeError, ValueError) as e:
            self.errors += 1
            if self.errors == 1:
                say(
                    f"/diagnostics not published: {type(e).__name__}: {e} (a node's health "
                    "not as docs/wire.md has it?); counted as diagnostics_errors, said once"
                )

    def _drain(self) -> int:
        """Take what arrived; the misses in it."""
        misses = 0
        for _ in range(DRAIN_MAX if self.sub is not None else 0):
            env = self.sub.recv(0)
            if env is None:
                break
            if env.topic == "health":
                self.health[env.body["node"]] = (env.src, env.body)
            elif is_late(env.body):
                misses += 1
            elif "e2e_ms" in env.body.get("fields", {}):
                self.window_ms.append(env.body["fields"]["e2e_ms"])
        return misses

    def _status(self, level: int, name: str, message: str, values: dict):
        m = self.msgs
        return m.DiagnosticStatus(
            level=bytes([level]),
            name=name,
            message=message,
            hardware_id=self.robot,
            values=[
                m.KeyValue(key=k, value=v if isinstance(v, str) else f"{v:g}")
                for k, v in values.items()
            ],
        )

    def publish(self) -> None:
        misses = self._drain()
        last = self.window_ms[-1] if self.window_ms else math.nan
        e2e, self.window_ms = sorted(self.window_ms), []
        self.cycles += len(e2e)
        self.misses += misses
        budget = next(
            (
                b["counters"]["budget_level"]
                for _, b in self.health.values()
                if "budget_level" in b["counters"]
            ),
            -1,
        )
        cycles = {
            "e2e_last_ms": last,
            "e2e_p50_ms": e2e[len(e2e) // 2] if e2e else math.nan,
            "e2e_max_ms": e2e[-1] if e2e else math.nan,
            "window_cycles": len(e2e),
            "cycles": self.cycles,
            "misses": self.misses,
            "budget_level": budget,
        }
        ok, warn = self.msgs.DiagnosticStatus.OK[0], self.msgs.DiagnosticStatus.WARN[0]
        status = [
            self._status(
                warn if misses else ok,
                "rtinfer/cycles",
                f"{misses} missed" if misses else "on time",
                cycles,
            ),
            self._status(ok, "rtinfer/bridge", "running", flat(self.counters())),
        ]
        for name, (src, b) in self.health.items():
            status.append(
                self._status(
                    ok if b["state"] in RUNNING else warn,
                    name,
                    b["state"],
                    {**b["counters"], **b["gauges"]},
                )
            )
            status[-1].hardware_id = src
        msg = self.msgs.DiagnosticArray(status=status)
        msg.header.stamp = self.clock.now().to_msg()
        self.pub.publish(msg)

    def close(self) -> None:
        if self.sub is not None:
            self.sub.close()
