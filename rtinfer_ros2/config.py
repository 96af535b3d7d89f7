"""The bridge's settings (docs/ros2.md, the `hardware:` table): one dataclass, checked once.

A robot file's `hardware:` section is this config's fields, key for key (`--set KEY=VALUE`
overrides one); `ROS2RobotConfig.from_hardware` reads it and says what is wrong with it in
one ValueError. Needs no ROS 2: the config can be read and checked on any host.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, fields

from .commands import TYPES

RELIABILITY = ("best_effort", "reliable")
# the settings that must be positive numbers (a rate, or a time that bounds a wait)
POSITIVE = ("silent_ms", "future_ms", "past_ms", "obs_hz", "frame_silent_ms", "wait_s")


@dataclass
class ROS2RobotConfig:
    """joint_states: the sensor_msgs/JointState topic. command: the controller's command
    topic. joints: the ROS joint names in axis order (None: the axis names). controller: one
    of commands.TYPES. reliability, depth: the QoS of both topics. silent_ms: a JointState gap
    longer than this is a silent topic. future_ms: a stamp further ahead than this (of this
    host's clock) is refused. past_ms: a stamp further behind its arrival than this is counted
    (js_past; give the run's --deadline-ms). obs_hz: observations per second (give
    controllers.run the same --policy-hz). observe: MODULE:FUNCTION, (pos, vel,
    **observe_args) -> the policy's values (None: {"joints": positions then velocities,
    float32}). cameras: camera name -> {topic, shape: [H, W, 3], compressed: false}
    (bridge.camera_configs checks them). frame_silent_ms: a camera with no frame newer than
    this makes the observation wait. lead_ms (trajectory_chunk): a waypoint due sooner than
    this is left out of its trajectory. diagnostics_hz: rtinfer's figures on /diagnostics
    this often (0: not at all), from what the run's nodes say on `listen` (endpoints).
    wait_s: how long to wait for the first JointState. node: the ROS node's name."""

    joint_states: str = "joint_states"
    command: str = "forward_position_controller/commands"
    joints: list[str] | None = None
    controller: str = "forward"
    reliability: str = "reliable"
    depth: int = 10
    silent_ms: float = 50.0
    future_ms: float = 5.0
    past_ms: float = 100.0
    obs_hz: float = 20.0
    observe: str | None = None
    observe_args: dict | None = None
    cameras: dict | None = None
    frame_silent_ms: float = 100.0
    lead_ms: float = 10.0
    diagnostics_hz: float = 2.0
    listen: list[str] | None = None
    wait_s: float = 10.0
    node: str = "rtinfer_bridge"

    def __post_init__(self) -> None:
        wrong = [
            f"{k} {getattr(self, k)!r} is not a positive number"
            for k in POSITIVE
            if not _number(getattr(self, k), positive=True)
        ]
        wrong += [
            f"{k} {getattr(self, k)!r} is not a number >= 0"
            for k in ("lead_ms", "diagnostics_hz")
            if not _number(getattr(self, k))
        ]
        if self.controller not in TYPES:
            wrong.append(f"controller {self.controller!r} is not one of {TYPES}")
        if self.reliability not in RELIABILITY:
            wrong.append(f"reliability {self.reliability!r} is not one of {RELIABILITY}")
        if not isinstance(self.depth, int) or isinstance(self.depth, bool) or self.depth < 1:
            wrong.append(f"depth {self.depth!r} is not a queue depth (an integer >= 1)")
        if wrong:
            raise ValueError("ros2 bridge: " + "; ".join(wrong))

    @classmethod
    def from_hardware(cls, hardware: dict) -> ROS2RobotConfig:
        """The config from a robot file's `hardware:` mapping; ValueError names each key it
        does not know (with the nearest one it does) and each value it cannot use."""
        known = [f.name for f in fields(cls)]
        unknown = [k for k in hardware if k not in known]
        if unknown:
            hints = [
                f"{k!r}"
                + "".join(
                    f" (did you mean {m!r}?)"
                    for m in difflib.get_close_matches(str(k), known, 1, 0.5)
                )
                for k in unknown
            ]
            raise ValueError(
                f"ros2 bridge: hardware options {', '.join(hints)} are not "
                f"ROS2Robot's; it takes {known}"
            )
        return cls(**hardware)


def _number(value, positive: bool = False) -> bool:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return ok and (value > 0 if positive else value >= 0)
