"""SimulatedAxes: ideal drives for every axis of a robot file, in numpy.

The stand-in hardware for trying a robot file and a policy before the real robot is
connected (as ros2_control's mock components are), for benchmarks and for tests:

    python -m controllers.run --hardware controllers.simulated:SimulatedAxes \
        --config my_robot.yaml --model my_policy --obs ... --actions ... --set gravity=5

Per command mode: a position axis is where it was commanded one tick later, a velocity axis
moves at the commanded velocity, an effort axis is a mass (the axis's `mass`, else 1 kg or
1 kg m^2) under the commanded effort less gravity: `gravity` (N or N m) on a linear axis, and
gravity * cos(angle) on a rotary ("rad") one, the torque of a link held out level at angle 0.
The tool's state is its last command. Not thread-safe.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .config import AxisConfig, ControlConfig
from .hardware import Command, RobotState

GAINS = {
    "effort": dict(effort_limit=50.0, kp=900.0, ki=900.0, kd=54.0, mass=1.0),
    "velocity": dict(kp=20.0),
    "position": {},
}


def uniform_robot(n: int, mode: str = "effort", **kw) -> ControlConfig:
    """A robot file of n alike rotary axes j0.. in `mode`: +-2 rad, 2 rad/s, 10 rad/s^2;
    effort axes on 1 kg m^2 with gains for ~30 rad/s bandwidth. kw: ControlConfig fields
    (e.g. tool=...). For benchmarks and tests of the controller itself."""
    return ControlConfig(
        tuple(
            AxisConfig(
                f"j{i}", "rad", mode, -2.0, 2.0, vel_limit=2.0, acc_limit=10.0, **GAINS[mode]
            )
            for i in range(n)
        ),
        **kw,
    )


class SimulatedAxes:
    def __init__(self, control: ControlConfig, *, start=0.0, gravity=0.0, compensate: bool = True):
        """start: the initial position per axis (or one for all); gravity: per axis (or one);
        compensate: offer the gravity() hook (False: the controller must do without)."""
        n = control.n
        self.dt_s = 1.0 / control.rate_hz
        self.modes = control.axis("mode")
        self.mass = [a.mass or 1.0 for a in control.axes]
        self.rotary = [a.unit == "rad" for a in control.axes]
        self.g = np.broadcast_to(np.asarray(gravity, float), (n,)).copy()
        self.state = RobotState(
            0, np.broadcast_to(np.asarray(start, float), (n,)).copy(), np.zeros(n)
        )
        self.value = np.zeros(n)  # the last command
        # the gravity(state, out) hook the controller looks for, or none to do without
        self.gravity: Callable[[RobotState, np.ndarray], None] | None = (
            self._gravity if compensate else None
        )

    def _gravity_load(self, k: int, q: float) -> float:
        return self.g[k] * math.cos(q) if self.rotary[k] else self.g[k]

    def _gravity(self, state: RobotState, out: np.ndarray) -> None:
        for k, q in enumerate(state.pos.tolist()):
            out[k] = self._gravity_load(k, q)

    def read(self) -> RobotState:
        return self.state

    def write(self, cmd: Command) -> None:
        self.value[:] = cmd.value
        self.state.tool = cmd.tool

    def advance(self, now_ns: int, following: bool) -> bool:
        """One tick of the drives (controllers.run calls it after every write); never ends
        the run."""
        self.step(self.dt_s)
        self.state.t_ns = now_ns
        return False

    def step(self, dt_s: float) -> None:
        s = self.state
        for k, mode in enumerate(self.modes):
            if mode == "effort":
                s.vel[k] += (self.value[k] - self._gravity_load(k, s.pos[k])) / self.mass[k] * dt_s
                s.pos[k] += s.vel[k] * dt_s
            elif mode == "velocity":
                s.vel[k] = self.value[k]
                s.pos[k] += s.vel[k] * dt_s
            else:
                s.vel[k] = (self.value[k] - s.pos[k]) / dt_s
                s.pos[k] = self.value[k]
        s.t_ns += int(dt_s * 1e9)
