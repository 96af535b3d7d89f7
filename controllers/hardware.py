"""The boundary between the controller and the robot (or the simulator standing in for it).

A robot is N axes (joints or linear axes) and an optional tool (a suction valve, a gripper),
described by data: controllers.config.ControlConfig. A driver implements HardwareInterface:
`read()` the state, optionally `observe()` what the policy sees, and `write()` a command,
each once per tick from the control loop thread; the controller owns the wire (it publishes
the observation). docs/robots.md is the contract. Units are the axis config's: positions in
m or rad, velocities per second, efforts in N or N m; times in monotonic nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


class HardwareFault(Exception):
    """A read or write that failed this tick (a bus timeout, a driver error). The controller
    catches it (and OSError), holds, counts it (read_faults, write_faults) and reports it in
    health. Any other exception is a bug and ends the loop (DriverError)."""


class DriverError(Exception):
    """A driver's method raised something other than HardwareFault or OSError: a bug in the
    driver. The loop ends; controllers.run writes the report, then exits 1 with this line
    (`method` names the class and method, e.g. "XYTable.read")."""

    def __init__(self, method: str, error: BaseException):
        super().__init__(f"{method} raised {type(error).__name__}: {error}")
        self.method, self.error = method, error


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
    def zeros(cls, n: int) -> RobotState:
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
    def zeros(cls, n: int) -> Command:
        return cls(np.zeros(n), 0.0, np.zeros(n), np.zeros(n))


@dataclass(slots=True)
class Observation:
    """What the robot observed for the policy, returned by a driver's observe(); the
    controller publishes it as an `obs` message (docs/wire.md section 5) stamped `capture`.

    capture_ns: when it was sensed, monotonic ns on the controller's clock (the loop's `now`
    for a simulator; a sensor's own stamp, on that clock, for a real robot). values: name ->
    numpy array; ints: name -> int. Their keys, dtypes and shapes are what the policy's
    observation spec names (its obs_spec.json or obs_tokens.json). frames: camera name ->
    (uint8 image [H, W, C], its own capture ns on the same clock), for the image inputs of
    the policy's obs_spec.json (docs/robots.md, "Cameras"). Sent without a copy, so an image
    must not change once returned: hand over a new array per frame (as camera SDKs and
    renderers give), and copy first where the driver reuses one buffer."""

    capture_ns: int
    values: dict[str, np.ndarray]
    ints: dict[str, int] = field(default_factory=dict)
    frames: dict[str, tuple[np.ndarray, int]] = field(default_factory=dict)


@runtime_checkable
class HardwareInterface(Protocol):
    """Implemented by a robot driver or a simulator.

    Both calls come from the control loop thread, once per tick, and must return within a
    small fraction of the tick (no I/O waits, no locks held by slow code). Either may raise
    HardwareFault (or OSError) for a failed transfer; the controller then holds.

    Optional methods, used when present:
      observe(state, now_ns) -> Observation | None: after every read, what the policy is to
          see (None: nothing due this tick); the controller publishes it. Its rate sets the
          policy's chunk rate.
      gravity(state, out): fill `out` (N,) with the effort that holds the robot still in
          `state` (gravity compensation), added as feed-forward on effort-mode axes.
      advance(now_ns, following) -> bool: a simulator only, after every write: step the
          world one tick (following: the controller has taken a chunk, so a simulator may
          keep its world still until then); True ends the run after this tick.
      health(robot, state) -> dict | None: a simulator's own `health` body (its task's
          counters), published by controllers.run twice a second and once at the end.
      on_chunk(waypoints, due_ns, now_ns): a driver whose robot executes trajectories
          itself: once per chunk, when it is complete and its first setpoint committed, and
          found within the deadline at now_ns (never a stale one): waypoints (count, dim)
          float64 as the controller tracks them (positions clipped into the workspace; a new
          array, the driver may keep it), due_ns (count,) int64, each one's due time, on the
          loop's clock like now_ns.
      on_hold(now_ns): with on_chunk: the controller stopped following chunks (its watchdog,
          a late chunk, safe_hold, stop, a fault); once per hold from tracking.
      report() -> dict: merged into the run's final report. close(): at the end."""

    def read(self) -> RobotState:
        """The latest state; the caller may keep a reference until the next read()."""
        ...

    def write(self, cmd: Command) -> None:
        """Apply `cmd`. Its arrays are reused by the caller: copy what you keep."""
        ...
