"""Bring your own robot: 1 to 6 axes in each command mode through the one controller code
path, the hold semantics per mode, the gravity hook, a smooth start, hardware faults, a
continuous tool, and a policy that does not fit refused before the first tick.

In process: a ControllerNode on real (inproc) ZeroMQ sockets, the numpy robot of
tests/motors.py stepped 1 ms per tick on an explicit clock. The controllers.run process
itself is tested in tests/test_controllers_run.py."""

import itertools

import numpy as np
import pytest
import zmq
from motors import GRIPPER, Motors, axes

from controllers.config import AxisConfig, ControlConfig, ToolConfig
from controllers.node import ControllerConfig, ControllerNode
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

MS = 1_000_000
PERIOD = 50 * MS
_names = itertools.count()


class Loop:
    """A robot, its ControllerNode, and a policy socket that sends it chunks."""

    def __init__(self, control: ControlConfig, hw: Motors, horizon: int = 4):
        k = next(_names)
        ctx = zmq.Context.instance()
        self.action = control.action_spec(horizon, PERIOD)
        self.policy = Publisher(f"inproc://robots-p{k}", "policy", ctx=ctx)
        self.sub = Subscriber(f"inproc://robots-p{k}", ["action_chunk", "command"], ctx=ctx)
        self.pub = Publisher(f"inproc://robots-h{k}", "robot", ctx=ctx)
        self.health = Subscriber(f"inproc://robots-h{k}", ["health"], ctx=ctx)
        cfg = ControllerConfig(control, action=self.action, chunk_interval_ns=PERIOD)
        self.hw, self.n = hw, control.n
        self.node = ControllerNode(hw, cfg, self.sub, self.pub, clock=lambda: self.t)
        self.t = now_ns()
        self.cycle = 0
        while self.node.counters["commands"] == 0:  # the slow joiner
            self.policy.publish("command", {"cmd": "clear", "reason": "sync"})
            self.tick()

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.node.tick()
            self.hw.step(1e-3)
            self.t += MS

    def send(self, waypoints) -> None:
        """One chunk of len(waypoints) rows, captured now, for this robot."""
        w = np.asarray(waypoints, np.float32)
        self.cycle += 1
        for i, row in enumerate(w):
            self.policy.publish(
                "action_chunk",
                waypoint_body(
                    self.cycle,
                    i,
                    len(w),
                    row,
                    spec=self.action.hash,
                    period_ns=PERIOD,
                    start_ns=PERIOD,
                    dest="robot",
                ),
                {"capture": self.t},
            )

    def follow(self, target, seconds: float, tool=None) -> None:
        """Chunks every 50 ms whose waypoints all sit at `target` (plus the tool value)."""
        row = list(np.broadcast_to(target, (self.n,))) + ([] if tool is None else [tool])
        for _ in range(int(seconds * 20)):
            self.send([row] * self.action.horizon)
            self.tick(50)


@pytest.mark.parametrize("n", [1, 6])
def test_one_and_six_axis_robots_reach_their_targets_through_the_same_code(n):
    control = axes(n, "effort")
    loop = Loop(control, Motors(control))
    target = np.linspace(0.3, -0.6, n)
    loop.follow(target, 2.0)
    c = loop.node.counters
    assert np.allclose(loop.hw.state.pos, target, atol=2e-3)
    assert c["chunks_accepted"] == 40 and not any(
        v for k, v in c.items() if k.startswith("rejected_")
    )
    assert loop.node.stack.counters["effort_clamps"] == 0  # no axis is left to saturate


@pytest.mark.parametrize("mode", ["position", "velocity", "effort"])
def test_hold_in_each_command_mode_brakes_then_keeps_the_position(mode):
    control = axes(2, mode)
    hw = Motors(control, gravity=5.0 if mode == "effort" else 0.0)
    loop = Loop(control, hw)
    loop.follow([0.8, -0.4], 0.25)  # still moving towards it when the chunks stop
    moving = np.abs(hw.state.vel).max()
    loop.tick(400)  # the watchdog holds: no fresh chunk for 150 ms
    assert loop.node.state == "hold" and loop.node.counters["holds"] == 1 and moving > 0.3
    held, values = hw.state.pos.copy(), []
    for _ in range(300):
        loop.tick()
        values.append(hw.value.copy())
    values = np.array(values)
    assert np.abs(hw.state.vel).max() < 1e-3 and np.allclose(hw.state.pos, held, atol=1e-3)
    if mode == "position":  # the command is the held reference: constant
        assert np.ptp(values, axis=0).max() == 0.0
    elif mode == "velocity":  # ramped to zero: what is left corrects the last lag
        assert np.abs(values[-1]).max() < 1e-5 < np.abs(values[0]).max()
    else:  # the effort is what holds the links against gravity
        assert np.allclose(values[-1], 5.0 * np.cos(hw.state.pos), atol=0.05)


def test_the_gravity_hook_holds_an_effort_axis_still_from_the_first_tick():
    sags = {}
    for compensate in (True, False):
        control = axes(1, "effort")
        hw = Motors(control, start=0.3, gravity=20.0, compensate=compensate)
        loop = Loop(control, hw)
        sag = 0.0
        for _ in range(500):
            loop.tick()
            sag = max(sag, abs(hw.state.pos[0] - 0.3))
        sags[compensate] = sag
    assert sags[True] < 1e-3 and sags[False] > 10 * sags[True]


def test_the_start_is_smooth_from_where_the_robot_is_never_a_jump_to_waypoint_0():
    control = axes(1, "position")
    hw = Motors(control, start=-1.5)
    loop = Loop(control, hw)
    refs = []
    for t in range(2500):  # each chunk 3 rad away, due in 50 ms: far beyond the limits
        if t % 50 == 0:
            loop.send([[1.5]] * 4)
        loop.tick()
        refs.append(loop.node.stack.cmd.ref_pos[0])
    steps = np.diff([-1.5] + refs)
    assert np.abs(steps).max() <= 2.0e-3 + 1e-12  # vel_limit * dt
    # acc_limit * dt^2, but for one tick where the braking curve hands over to the exact
    # plan near the target (the tracker's discrete stopping rule: 1.48x seen)
    acc = np.abs(np.diff(steps)) / 1e-5
    assert acc.max() <= 1.5 and np.count_nonzero(acc > 1 + 1e-9) <= 2
    assert abs(refs[-1] - 1.5) < 1e-6


def test_failed_reads_and_writes_hold_are_counted_in_health_and_recover():
    control = axes(2, "position")
    hw = Motors(control)
    loop = Loop(control, hw)
    loop.follow([0.5, 0.5], 0.5)
    assert loop.node.state == "run"
    hw.fail_reads = 5
    loop.tick(2)
    assert loop.node.state == "fault" and loop.node.counters["read_faults"] == 2
    loop.send([[1.0, 1.0]] * 4)  # not followed while the robot does not answer
    loop.tick(3)
    assert loop.node.counters["rejected_hold"] == 4
    loop.tick()  # a good read and write: holding, awaiting a fresh chunk
    assert loop.node.state == "hold" and loop.node.counters["read_faults"] == 5
    assert np.allclose(hw.state.pos, 0.5, atol=1e-3)  # held where it was
    hw.fail_writes = 3
    loop.tick(4)
    assert loop.node.counters["write_faults"] == 3 and loop.node.state == "hold"
    loop.follow([1.0, 1.0], 1.0)
    assert loop.node.state == "run" and np.allclose(hw.state.pos, 1.0, atol=1e-3)
    loop.tick(200)  # past a health period
    bodies = [e.body for e in iter(lambda: loop.health.recv(timeout_ms=20), None)]
    assert bodies[-1]["counters"]["read_faults"] == 5
    assert bodies[-1]["counters"]["write_faults"] == 3


def test_a_continuous_tool_is_clipped_and_switched_at_its_waypoints_due_time():
    control = axes(1, "position", tool=GRIPPER)
    hw = Motors(control)
    loop = Loop(control, hw)
    loop.send([[0.0, 0.02], [0.0, 0.02], [0.0, 0.5], [0.0, 0.5]])
    seen = []
    for _ in range(260):
        loop.tick()
        seen.append(hw.state.tool)
    assert seen[40] == 0.0 and seen[60] == pytest.approx(0.02) and seen[-1] == 0.04


def test_a_policy_that_does_not_fit_the_robot_is_refused_naming_both_sides():
    six = axes(6, "effort")
    with pytest.raises(ValueError) as e:
        ControllerConfig(six, action=axes(1, "effort").action_spec(4, PERIOD))
    assert "1 action dimensions ['j0']" in str(e.value) and "this robot has 6" in str(e.value)
    metres = ControlConfig(
        tuple(
            AxisConfig(
                a.name,
                "m",
                a.mode,
                a.low,
                a.high,
                a.vel_limit,
                a.acc_limit,
                effort_limit=50.0,
                kp=1.0,
            )
            for a in six.axes
        )
    )
    with pytest.raises(ValueError, match=r"units \['m'.*are not this robot's \['rad'"):
        ControllerConfig(six, action=metres.action_spec(4, PERIOD))
    wide = ControlConfig(
        tuple(
            AxisConfig(
                a.name,
                a.unit,
                a.mode,
                -3.0,
                3.0,
                a.vel_limit,
                a.acc_limit,
                effort_limit=50.0,
                kp=1.0,
            )
            for a in six.axes
        )
    )
    with pytest.raises(ValueError, match=r"j0 spans \[-3, 3\], beyond this robot's \[-2, 2\]"):
        ControllerConfig(six, action=wide.action_spec(4, PERIOD))


@pytest.mark.parametrize(
    "bad, says",
    [
        (dict(mode="torque"), "mode 'torque' must be one of"),
        (dict(low=1.0, high=-1.0), "needs finite low < high"),
        (dict(mode="effort"), "effort mode needs a finite effort_limit"),
        (dict(mode="position", kp=3.0), "position mode: the drive closes the loop"),
        (dict(mode="velocity", kd=1.0), "velocity mode does not use kd"),
        (dict(mode="velocity", ki=1.0), "ki without kp"),
        (dict(vel_limit=0.0), "vel_limit must be finite and > 0"),
    ],
)
def test_an_axis_config_that_cannot_run_is_refused_with_the_fix(bad, says):
    kw = {
        **dict(
            name="a", unit="rad", mode="position", low=-1.0, high=1.0, vel_limit=1.0, acc_limit=1.0
        ),
        **bad,
    }
    with pytest.raises(ValueError, match=says):
        AxisConfig(**kw)


def test_robot_configs_refuse_duplicate_names_and_unknown_tool_kinds():
    a = axes(1, "position").axes[0]
    with pytest.raises(ValueError, match="distinct names"):
        ControlConfig((a, a))
    with pytest.raises(ValueError, match="kind in"):
        ToolConfig("grip", "analog")


def test_the_conveyor_robot_file_is_the_cells_own_derivation():
    from controllers.run import load_policy_spec, load_robot
    from examples.conveyor_sorting.config import CellConfig, control_config, tokenizer_config

    name, control, hardware = load_robot("examples.conveyor_sorting:robot.yaml")
    assert name == "sim" and control == control_config(CellConfig())
    tok, act = load_policy_spec("examples.conveyor_sorting:tokenizer.json")
    assert act is None and tok == tokenizer_config(CellConfig())
