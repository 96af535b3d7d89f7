"""The robot side: setpoint tracking, PID, safety limits and the 1 kHz ControllerNode.

Imports only numpy and rtinfer's light core (never torch, onnxruntime, tensorrt, mujoco).
"""

from .config import AxisConfig, ControlConfig, ToolConfig
from .hardware import Command, HardwareFault, HardwareInterface, RobotState
from .stack import ControlStack

__all__ = [
    "AxisConfig",
    "Command",
    "ControlConfig",
    "ControlStack",
    "HardwareFault",
    "HardwareInterface",
    "RobotState",
    "ToolConfig",
]
