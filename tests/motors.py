"""Robots for the controller tests: robot files of N axes in one command mode, and
controllers.simulated.SimulatedAxes with read and write faults on demand."""

from __future__ import annotations

from controllers.config import ToolConfig
from controllers.hardware import HardwareFault
from controllers.simulated import SimulatedAxes, uniform_robot

axes = uniform_robot


class Motors(SimulatedAxes):
    """SimulatedAxes whose next fail_reads reads and fail_writes writes raise HardwareFault."""

    fail_reads = fail_writes = 0

    def read(self):
        if self.fail_reads:
            self.fail_reads -= 1
            raise HardwareFault("bus timeout")
        return super().read()

    def write(self, cmd) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise HardwareFault("write refused")
        super().write(cmd)


GRIPPER = ToolConfig("gripper", "continuous", "m", 0.0, 0.04)
