"""A numpy robot for the controller tests: N independent axes, each a mass on a rail (or a
link on a joint) driven in its command mode, with optional gravity. It implements the
hardware contract of docs/robots.md, hooks included, and nothing else."""
from __future__ import annotations

import math

import numpy as np

from controllers.config import AxisConfig, ControlConfig, ToolConfig
from controllers.hardware import Command, HardwareFault, RobotState


def axes(n: int, mode: str = "effort", **kw) -> ControlConfig:
    """n rotary axes in `mode`, +-2 rad, 2 rad/s, 10 rad/s^2; effort axes on 1 kg m^2 with
    gains for ~30 rad/s bandwidth. kw: ControlConfig fields (e.g. tool=...)."""
    gains = {"effort": dict(effort_limit=50.0, kp=900.0, ki=900.0, kd=54.0, mass=1.0),
             "velocity": dict(kp=20.0), "position": {}}[mode]
    return ControlConfig(tuple(AxisConfig(f"j{i}", "rad", mode, -2.0, 2.0, vel_limit=2.0,
                                          acc_limit=10.0, **gains) for i in range(n)), **kw)


class Motors:
    """Each axis: inertia 1 (kg m^2); effort mode integrates the torque minus gravity
    (g_torque * cos(q) with `gravity`), velocity mode follows the commanded velocity
    exactly, position mode jumps to the commanded position (an ideal servo). step(dt)
    advances the physics. fail_reads / fail_writes: that many next calls raise
    HardwareFault."""

    def __init__(self, control: ControlConfig, *, start=0.0, gravity: float = 0.0,
                 compensate: bool = True):
        n = control.n
        self.modes = control.axis("mode")
        self.state = RobotState(0, np.broadcast_to(np.asarray(start, float), (n,)).copy(),
                                np.zeros(n))
        self.g = gravity
        self.value = np.zeros(n)
        self.writes = 0
        self.fail_reads = self.fail_writes = 0
        self.last: Command | None = None
        if not compensate:
            self.gravity = None  # no hook: the controller must do without

    def gravity(self, state: RobotState, out: np.ndarray) -> None:
        np.multiply(np.cos(state.pos), self.g, out=out)

    def read(self) -> RobotState:
        if self.fail_reads:
            self.fail_reads -= 1
            raise HardwareFault("bus timeout")
        return self.state

    def write(self, cmd: Command) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise HardwareFault("write refused")
        self.value[:] = cmd.value
        self.state.tool = cmd.tool
        self.writes += 1

    def step(self, dt_s: float) -> None:
        s = self.state
        for k, mode in enumerate(self.modes):
            if mode == "effort":
                s.vel[k] += (self.value[k] - self.g * math.cos(s.pos[k])) * dt_s
                s.pos[k] += s.vel[k] * dt_s
            elif mode == "velocity":
                s.vel[k] = self.value[k]
                s.pos[k] += s.vel[k] * dt_s
            else:
                s.vel[k] = (self.value[k] - s.pos[k]) / dt_s
                s.pos[k] = self.value[k]
        s.t_ns += int(dt_s * 1e9)


GRIPPER = ToolConfig("gripper", "continuous", "m", 0.0, 0.04)
