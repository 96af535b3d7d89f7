"""The robot side: setpoint tracking, PID, safety limits and the 1 kHz ControllerNode.

Imports only numpy and rtinfer's light core (never torch, onnxruntime, tensorrt, mujoco).
"""
from .hardware import Command, HardwareInterface, RobotState
from .stack import ControlConfig, ControlStack

__all__ = ["Command", "ControlConfig", "ControlStack", "HardwareInterface", "RobotState"]
