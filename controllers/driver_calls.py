"""DriverCalls: the controller's part that calls the robot's driver.

It owns the driver (controllers.hardware.HardwareInterface), the optional methods it has
(observe, on_chunk, on_hold), the last state read well, and the key of the chunk committed
and not yet handed to on_chunk. A HardwareFault (or OSError) from a call is a failed
transfer, returned as False (read() raises it) for the node to count and hold on; any other
exception is a bug in the driver: DriverError naming the method. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hardware import (
    Command,
    DriverError,
    HardwareFault,
    HardwareInterface,
    Observation,
    RobotState,
)

FAULTS = (HardwareFault, OSError)  # a failed transfer; any other exception is a bug


class DriverCalls:
    def __init__(self, hw: HardwareInterface):
        self.hw = hw
        self._observe: Callable[[RobotState, int], Observation | None] | None = getattr(
            hw, "observe", None
        )
        self.on_chunk: Callable[..., Any] | None = getattr(hw, "on_chunk", None)
        self.on_hold: Callable[[int], Any] | None = getattr(hw, "on_hold", None)
        self.last_state: RobotState | None = None  # the last good read
        self.committed: tuple | None = None  # the chunk committed, not yet handed to on_chunk

    def bug(self, method: str, error: Exception) -> DriverError:
        return DriverError(f"{type(self.hw).__name__}.{method}", error)

    def read(self) -> RobotState:
        """The robot's state (kept as last_state); raises FAULTS, or DriverError."""
        try:
            state = self.last_state = self.hw.read()
            return state
        except FAULTS:
            raise
        except Exception as e:  # a bug in the driver: the loop ends, naming it
            raise self.bug("read", e) from e

    def observe(self, state: RobotState, now: int) -> Observation | None:
        """The driver's observation this tick (None: none, or a driver without observe())."""
        if self._observe is None:
            return None
        try:
            return self._observe(state, now)
        except Exception as e:  # observe() touches no bus: any exception is a driver bug
            raise self.bug("observe", e) from e

    def write(self, cmd: Command) -> bool:
        """hw.write(cmd): False on a HardwareFault (a failed write), DriverError on any other
        exception. The tick's call: no argument tuple."""
        try:
            self.hw.write(cmd)
            return True
        except FAULTS:
            return False
        except Exception as e:
            raise self.bug("write", e) from e

    def call(self, method: str, call: Callable[..., Any], *args: Any) -> bool:
        """A driver call that sends to the robot: False on a HardwareFault (a failed write),
        DriverError on any other exception."""
        try:
            call(*args)
            return True
        except FAULTS:
            return False
        except Exception as e:
            raise self.bug(method, e) from e
