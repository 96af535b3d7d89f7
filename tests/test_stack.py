"""ControlStack and SafetyLimits on a pure-numpy gantry plant (double integrator + gravity on z)."""

import numpy as np
import pytest
from conftest import gantry_control

from controllers.config import ControlConfig
from controllers.hardware import Command, HardwareInterface, RobotState
from controllers.limits import SafetyLimits
from controllers.stack import ControlStack

MS = 1_000_000
G = 9.81
MASS = np.array([2.0, 2.0, 1.0])


class Gantry:
    """The plant: three point masses on rails, gravity pulling z down."""

    def __init__(self, pos):
        self.state = RobotState(0, np.array(pos, float), np.zeros(3))

    def read(self) -> RobotState:
        return self.state

    def write(self, cmd: Command) -> None:
        self.force, self.state.tool = cmd.value.copy(), cmd.tool

    def step(self, dt_ns: int) -> None:
        acc = self.force / MASS - np.array([0.0, 0.0, G])
        self.state.vel += acc * dt_ns * 1e-9
        self.state.pos += self.state.vel * dt_ns * 1e-9
        self.state.t_ns += dt_ns


def _cfg(**kw):
    return gantry_control(gravity=(0.0, 0.0, MASS[2] * G), mass=tuple(MASS), **kw)


def _loop(stack, plant, t_from, t_to, log=None):
    for t in range(t_from, t_to, MS):
        plant.write(stack.compute(plant.read(), t))
        plant.step(MS)
        if log is not None:
            log.append(
                (t, plant.state.pos.copy(), plant.state.vel.copy(), stack.tracker.vel.copy())
            )


def _chunk(points, suction):
    w = np.zeros((len(points), 4))
    w[:, :3], w[:, 3] = points, suction
    return w


def test_the_plant_satisfies_the_hardware_interface():
    assert isinstance(Gantry([0, 0, 0]), HardwareInterface)


def test_a_chunk_is_tracked_to_its_last_waypoint_against_gravity():
    stack, plant = ControlStack(_cfg()), Gantry([0.0, 0.0, 0.2])
    _loop(stack, plant, 0, 50 * MS)
    assert stack.holding and abs(plant.state.pos[2] - 0.2) < 1e-3  # gravity ff holds z up
    pts = [[0.02, 0.0, 0.2], [0.05, 0.02, 0.18], [0.08, 0.04, 0.15], [0.1, 0.05, 0.12]]
    stack.set_chunk(
        _chunk(pts, [0, 1, 1, 1]), capture_ns=30 * MS, period_ns=50 * MS, now_ns=50 * MS
    )
    assert not stack.holding
    _loop(stack, plant, 50 * MS, 1000 * MS)
    assert np.allclose(plant.state.pos, pts[-1], atol=1e-3)
    assert np.allclose(plant.state.vel, 0.0, atol=1e-3)
    assert plant.state.tool


def test_hold_brakes_to_a_stop_within_the_deceleration_limit_and_keeps_suction():
    stack, plant = ControlStack(_cfg(hold_decel=(2.0, 2.0, 2.0))), Gantry([0.0, 0.0, 0.2])
    pts = [[0.05 * (i + 1), 0.0, 0.2] for i in range(4)]  # 1 m/s asked, 0.6 m/s allowed
    stack.set_chunk(_chunk(pts, 1.0), 0, 50 * MS, 0)
    _loop(stack, plant, 0, 150 * MS)
    v0 = stack.tracker.vel[0]
    assert v0 > 0.3 and plant.state.tool
    stack.hold(150 * MS)
    log = []
    _loop(stack, plant, 150 * MS, 800 * MS, log)
    ref_vel = np.array([r for *_, r in log])
    assert np.all(np.abs(np.diff(ref_vel, axis=0)) <= 2.0e-3 + 1e-12)
    assert np.all(ref_vel[int(v0 / 2.0 * 1e3) + 2 :] == 0.0)  # stopped after v0/decel
    assert np.allclose(plant.state.vel, 0.0, atol=2e-3)
    assert stack.holding and plant.state.tool


def test_a_new_chunk_ends_the_hold():
    stack, plant = ControlStack(_cfg()), Gantry([0.0, 0.0, 0.2])
    _loop(stack, plant, 0, 10 * MS)
    stack.hold(10 * MS)
    stack.set_chunk(_chunk([[0.01, 0.0, 0.2]], 0.0), 10 * MS, 50 * MS, 10 * MS)
    assert not stack.holding


def test_a_chunk_before_the_first_compute_starts_from_the_robot_pose():
    stack, plant = ControlStack(_cfg()), Gantry([0.1, 0.1, 0.3])
    stack.set_chunk(_chunk([[0.11, 0.1, 0.3]] * 4, 0.0), 0, 50 * MS, 0)
    plant.write(stack.compute(plant.read(), 0))
    assert np.allclose(stack.tracker.pos, [0.1, 0.1, 0.3]) and not stack.holding
    _loop(stack, plant, MS, 600 * MS)
    assert np.allclose(plant.state.pos, [0.11, 0.1, 0.3], atol=1e-3)


def test_waypoints_outside_the_workspace_are_clipped_and_counted():
    cfg = _cfg(low=(-0.2, -0.2, 0.0), high=(0.2, 0.2, 0.3))
    stack, plant = ControlStack(cfg), Gantry([0.0, 0.0, 0.1])
    stack.set_chunk(_chunk([[0.5, 0.0, 0.1], [0.5, -0.9, 0.4]], 0.0), 0, 50 * MS, 0)
    assert stack.counters["waypoint_clamps"] == 4
    _loop(stack, plant, 0, 1500 * MS)
    assert np.allclose(plant.state.pos, [0.2, -0.2, 0.3], atol=2e-3)


def test_forces_are_limited_and_counted():
    stack, _plant = (
        ControlStack(_cfg(effort_limit=(5.0, 5.0, 30.0), kp=(1e4, 1e4, 1e4))),
        Gantry([0.0, 0.0, 0.2]),
    )
    stack.set_chunk(_chunk([[0.2, 0.0, 0.2]] * 4, 0.0), 0, 50 * MS, 0)
    cmd = stack.compute(RobotState(0, np.array([-0.3, 0.0, 0.2]), np.zeros(3)), 0)
    cmd = stack.compute(RobotState(MS, np.array([-0.3, 0.0, 0.2]), np.zeros(3)), MS)
    assert cmd.value[0] == 5.0 and stack.counters["effort_clamps"] >= 1


def test_compute_reuses_its_command_object():
    stack, plant = ControlStack(_cfg()), Gantry([0.0, 0.0, 0.2])
    a = stack.compute(plant.read(), 0)
    b = stack.compute(plant.read(), MS)
    assert a is b and a.value is b.value and a.ref_pos is b.ref_pos


def test_outward_force_is_cut_to_the_gravity_bias_at_a_workspace_bound():
    lim = SafetyLimits(
        gantry_control(
            low=(-0.2, -0.2, 0.0),
            high=(0.2, 0.2, 0.3),
            safety_vel_limit=(1.0,) * 3,
            effort_limit=(100.0,) * 3,
        )
    )
    bias = np.array([0.0, 0.0, G])
    f = lim.apply(np.array([5.0, -5.0, 20.0]), np.array([0.2, 0.0, 0.3]), np.zeros(3), bias)
    assert np.allclose(f, [0.0, -5.0, G])  # x and z were pushing out of the box
    f = lim.apply(np.array([-5.0, -5.0, 0.0]), np.array([0.25, -0.2, 0.0]), np.zeros(3), bias)
    assert np.allclose(f, [-5.0, 0.0, G])  # x pushes back in: kept; z would let it drop
    assert lim.counters["workspace_clamps"] == 4


def test_force_that_speeds_up_past_the_velocity_limit_is_removed():
    lim = SafetyLimits(
        gantry_control(
            low=(-1.0,) * 3, high=(1.0,) * 3, safety_vel_limit=(0.5,) * 3, effort_limit=(100.0,) * 3
        )
    )
    f = lim.apply(np.array([3.0, 3.0, -3.0]), np.zeros(3), np.array([0.6, -0.6, 0.1]), np.zeros(3))
    assert np.allclose(f, [0.0, 3.0, -3.0]) and lim.counters["velocity_clamps"] == 1


def test_control_config_round_trips_and_refuses_unknown_keys():
    cfg = _cfg(blend_ns=10 * MS)
    assert ControlConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown"):
        ControlConfig.from_dict({**cfg.to_dict(), "kp_x": 1.0})
    with pytest.raises(ValueError, match=r"axes\[1\]: unknown keys \['kpp'\]"):
        ControlConfig.from_dict(
            {"axes": [cfg.to_dict()["axes"][0], {**cfg.to_dict()["axes"][1], "kpp": 1.0}]}
        )
