"""The boundary between the controller and the robot (or the simulator standing in for it).

A robot is N axes (joints or linear axes) and an optional tool (a suction valve, a gripper),
described by data: controllers.config.ControlConfig. A driver implements HardwareInterface:
`read()` the state and `write()` a command, each once per tick from the control loop
thread. docs/robots.md is the contract. Units are the axis config's: positions in m or rad,
velocities per second, efforts in N or N m; times in monotonic nanoseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


class HardwareFault(Exception):
    """A read or write that failed this tick (a bus timeout, a driver error). The controller
    catches it (and OSError), holds, counts it (read_faults, write_faults) and reports it in
    health. Any other exception is a bug and ends the loop."""


@dataclass(slots=True)
class RobotState:
    """One sample of the robot.

    pos, vel: (N,) float64 per axis, in the axis's unit and unit/s. tool: the tool's state
    in its unit (a suction valve: 1 open, 0 closed; a gripper: its opening). holding: the
    tool has an object (a vacuum or grip sensor; False if it cannot tell)."""
    t_ns: int
    pos: np.ndarray
    vel: np.ndarray
    tool: float = 0.0
    holding: bool = False

    @classmethod
    def zeros(cls, n: int) -> "RobotState":
        return cls(0, np.zeros(n), np.zeros(n))


@dataclass(slots=True)
class Command:
    """What the controller asks of the robot for one tick, already limited.

    value: (N,) float64 per axis, in the axis's command mode: a position (unit), a velocity
    (unit/s) or an effort (N or N m). tool: the tool command (a binary tool gets its low or
    high value, a continuous one a value within [low, high]). ref_pos, ref_vel: (N,) the
    tracked reference this tick, for drives that take feed-forward."""
    value: np.ndarray
    tool: float
    ref_pos: np.ndarray
    ref_vel: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> "Command":
        return cls(np.zeros(n), 0.0, np.zeros(n), np.zeros(n))


@runtime_checkable
class HardwareInterface(Protocol):
    """Implemented by a robot driver or a simulator.

    Both calls come from the control loop thread, once per tick, and must return within a
    small fraction of the tick (no I/O waits, no locks held by slow code). Either may raise
    HardwareFault (or OSError) for a failed transfer; the controller then holds.

    Optional methods, used when present:
      gravity(state, out): fill `out` (N,) with the effort that holds the robot still in
          `state` (gravity compensation), added as feed-forward on effort-mode axes.
      on_tick(node, state, now_ns): called after every write (a simulator steps its
          physics and publishes `obs` here); `node` is the ControllerNode (node.counters;
          node.stop() ends the run after this tick).
      on_stop(node): once, after the loop ended (a simulator's final health message).
      report() -> dict: merged into the run's final report. close(): at the end."""

    def read(self) -> RobotState:
        """The latest state; the caller may keep a reference until the next read()."""
        ...

    def write(self, cmd: Command) -> None:
        """Apply `cmd`. Its arrays are reused by the caller: copy what you keep."""
        ...
