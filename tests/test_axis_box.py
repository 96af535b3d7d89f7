"""The reference never leaves [low + margin, high - margin], whatever the chunk or the timing.

A policy 1 m past its targets and a robot process that stalls (70 ms every 130 ms): the
conveyor gantry's x axis, an effort axis, on controllers.simulated.SimulatedAxes (a mass
under the commanded force). The simulator steps in the robot process, so it stalls with it
(the review's case); a real robot's world runs on under the last command meanwhile, which no
controller can limit, so there only the reference is checked.
"""

import numpy as np
import pytest

from controllers.config import ControlConfig
from controllers.run import load_robot
from controllers.simulated import SimulatedAxes
from controllers.stack import ControlStack
from controllers.tracker import SetpointTracker

MS = 1_000_000
_, GANTRY, _ = load_robot("examples.conveyor_sorting:robot.yaml")


def run_with_stalls(
    control: ControlConfig,
    rows,
    *,
    seconds=8.0,
    stall_every_ms=130,
    stall_ms=70,
    chunk_every_ms=50,
    world_runs_on=False,
):
    """Tick at 1 kHz with a stall of stall_ms every stall_every_ms; a new chunk of `rows`
    (alternating order each chunk) every chunk_every_ms. Returns the reference and the
    measured positions at every tick, (ticks, n) each."""
    stack, plant = ControlStack(control), SimulatedAxes(control, start=0.0)
    refs, axes = [], []
    now, next_chunk, next_stall, cycle = 0, 0, stall_every_ms * MS, 0
    while now < seconds * 1e9:
        if now >= next_chunk:
            cycle += 1
            w = np.array(rows if cycle % 2 else rows[::-1], float)
            stack.set_chunk(w, now, chunk_every_ms * MS, now)
            next_chunk = now + chunk_every_ms * MS
        cmd = stack.compute(plant.read(), now)
        plant.write(cmd)
        refs.append(cmd.ref_pos.copy())
        gap = stall_ms if now >= next_stall else 1
        if gap > 1:
            next_stall = now + gap * MS + stall_every_ms * MS
        for _ in range(gap if world_runs_on else 1):
            plant.step(1e-3)
            axes.append(plant.state.pos.copy())
        now += gap * MS
    return np.array(refs), np.array(axes)


@pytest.mark.parametrize(
    "stall_ms, world_runs_on",
    [(1, False), (70, False), (70, True)],
    ids=["no-stall", "stall", "stall-world-runs-on"],
)
def test_a_chunk_jumping_1_m_past_the_axis_stays_inside_whatever_the_stalls(
    stall_ms, world_runs_on
):
    x = GANTRY.axes[0]  # low -0.7, high 0.65, margin 0.005
    rows = [[x.high + 0.35, 0.0, 0.5, 0.0], [x.high - 0.65, 0.0, 0.5, 0.0]] * 2
    refs, axes = run_with_stalls(GANTRY, rows, stall_ms=stall_ms, world_runs_on=world_runs_on)
    lo, hi = x.workspace
    assert refs[:, 0].max() <= hi and refs[:, 0].min() >= lo, (
        f"reference reached {refs[:, 0].min():.4f}..{refs[:, 0].max():.4f}, box {lo}..{hi}"
    )
    assert world_runs_on or axes[:, 0].max() <= x.high and axes[:, 0].min() >= x.low, (
        f"axis reached {axes[:, 0].min():.4f}..{axes[:, 0].max():.4f}, limits {x.low}..{x.high}"
    )
    assert refs[:, 0].max() > hi - 0.05  # it did go to the bound: the test can fail


@pytest.mark.parametrize("dt_ms", [1, 20, 70, 300])
def test_a_reference_heading_out_at_full_speed_stops_on_the_bound_at_any_step(dt_ms):
    t = SetpointTracker(1.2, 10.0, n_axes=1, low=-0.5, high=0.5)
    t.reset([0.0], 0)
    t.set_chunk(np.array([[0.5], [0.5]]), 0, 50 * MS, 0)
    t.pos[:], t.vel[:] = 0.49, 1.2  # as after a re-plan at speed, just inside the bound
    for k in range(1, 20):
        pos, vel, _ = t.update(k * dt_ms * MS)
        assert -0.5 <= pos[0] <= 0.5
    t.brake(20 * dt_ms * MS)
    t.vel[:] = -1.2
    t.pos[:] = -0.49
    pos, _, _ = t.update(21 * dt_ms * MS)
    assert pos[0] >= -0.5


def test_a_reference_that_starts_outside_the_box_never_moves_further_out():
    t = SetpointTracker(1.0, 10.0, n_axes=1, low=0.0, high=1.0)
    t.reset([1.2], 0)
    t.vel[:] = 0.5  # drifting outwards when the hold begins
    t.brake(0)
    for k in range(1, 50):
        pos, _, _ = t.update(k * MS)
        assert pos[0] <= 1.2
