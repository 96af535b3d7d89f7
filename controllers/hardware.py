"""The boundary between the controller and the robot (or the simulator standing in for it).

`HardwareInterface` is the one thing a cell has to implement: `read()` the robot state,
`write()` a command. Units are SI: metres, m/s, newtons, monotonic nanoseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


def _zeros3() -> np.ndarray:
    return np.zeros(3)


@dataclass(slots=True)
class RobotState:
    """One sample of the gantry.

    t_ns: monotonic time of the sample (ns). pos, vel: (3,) float64 x, y, z in m and m/s.
    suction: the suction valve is open. holding: the suction cup has an object attached
    (vacuum sensor), not to be confused with `ControlStack.holding` (hold mode).
    """
    t_ns: int = 0
    pos: np.ndarray = field(default_factory=_zeros3)
    vel: np.ndarray = field(default_factory=_zeros3)
    suction: bool = False
    holding: bool = False


@dataclass(slots=True)
class Command:
    """What the controller asks of the robot for one tick.

    force: (3,) float64 motor forces in N along x, y, z (already limited).
    suction: open (True) or close the suction valve.
    """
    force: np.ndarray = field(default_factory=_zeros3)
    suction: bool = False


@runtime_checkable
class HardwareInterface(Protocol):
    """Implemented by a robot driver or a simulator.

    Both calls are made from the control loop thread, once per tick, and must not block
    longer than a small fraction of the tick (no I/O waits, no locks held by slow code).
    """

    def read(self) -> RobotState:
        """Return the latest state; the caller may keep a reference until the next read()."""
        ...

    def write(self, cmd: Command) -> None:
        """Apply `cmd`. The arrays in `cmd` are reused by the caller: copy what you keep."""
        ...
