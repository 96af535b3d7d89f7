"""The MuJoCo conveyor cell: scene, belt, scoring of missed / dropped / binned objects, suction."""

from dataclasses import replace

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from controllers.hardware import Command, HardwareInterface  # noqa: E402
from controllers.stack import ControlStack  # noqa: E402
from examples.conveyor_sorting.cell import ConveyorCell  # noqa: E402
from examples.conveyor_sorting.config import CellConfig, control_config  # noqa: E402
from examples.conveyor_sorting.pool import LIVE, PARKED  # noqa: E402

PERIOD_NS = 50_000_000


def _quiet_cell(**over) -> ConveyorCell:
    """A cell that spawns nothing by itself."""
    cell = ConveyorCell(replace(CellConfig(), **over))
    cell.spawn_limit = 0
    return cell


def _drive(cell: ConveyorCell, stack: ControlStack, waypoint, ms: int) -> None:
    """Hold one waypoint (x, y, z, suction) through the real control stack for `ms` ms."""
    stack.set_chunk(np.tile(np.asarray(waypoint, float), (4, 1)), cell.t_ns, PERIOD_NS, cell.t_ns)
    for _ in range(ms):
        cell.write(stack.compute(cell.read(), cell.t_ns))
        cell.step()


def _pick(cell: ConveyorCell, s: int) -> ControlStack:
    """Bring the cup down onto resting object s with suction on; returns the stack."""
    stack = ControlStack(control_config(cell.cfg))
    x, y = cell.pool.qpos[s, :2]
    top = cell.cfg.belt_top + 2 * cell.pool.half_h[s]
    _drive(cell, stack, (x, y, top + 0.05, 0), 800)
    _drive(cell, stack, (x, y, top + 0.003, 1), 400)
    return stack


def test_scene_loads_and_steps_one_ms_at_a_time():
    cell = ConveyorCell()
    assert isinstance(cell, HardwareInterface)
    cell.step(100)
    assert cell.t_ns == 100_000_000
    assert cell.data.time == pytest.approx(0.1)
    assert np.isfinite(cell.data.qpos).all()
    assert cell.metrics.spawned == 1  # the first object spawns at once


def test_belt_moves_an_object_at_belt_speed():
    cell = _quiet_cell()
    s = cell.place_object(0, -0.5)
    cell.step(20)
    x0 = cell.pool.qpos[s, 0]
    cell.step(1000)
    assert cell.pool.qpos[s, 0] - x0 == pytest.approx(0.3, rel=0.01)
    assert abs(cell.pool.qpos[s, 1]) < 1e-6


def test_object_passing_the_belt_end_counts_missed_and_is_recycled():
    cell = _quiet_cell()
    s = cell.place_object(2, 0.5)
    cell.step(1500)
    assert cell.metrics.missed == 1 and cell.metrics.resolved == 1
    assert cell.pool.state[s] == PARKED


def test_spawner_uses_random_lateral_positions_and_intervals():
    cell = ConveyorCell(replace(CellConfig(), seed=3))
    ys, births = set(), []
    for _ in range(8000):
        cell.step()
        live = np.flatnonzero((cell.pool.state == LIVE) & (cell.pool.born_step == cell.step_count))
        for s in live:
            ys.add(round(float(cell.pool.qpos[s, 1]), 4))
            births.append(cell.step_count)
    assert len(ys) == len(births) >= 3
    gaps = np.diff(births) / 1000
    assert (gaps >= 1.5).all() and (gaps <= 2.5).all() and len(set(gaps)) > 1


def test_suction_picks_a_touching_object_and_releases_it():
    cell = _quiet_cell(belt_speed=0.0)
    s = cell.place_object(1, 0.0, 0.05)
    stack = _pick(cell, s)
    assert cell.read().holding and cell.held == s and cell.metrics.picked == 1
    _drive(cell, stack, (0.0, 0.05, 0.55, 1), 800)
    assert cell.pool.qpos[s, 2] > 0.45  # lifted with the cup
    _drive(cell, stack, (0.0, 0.05, 0.55, 0), 300)
    assert not cell.read().holding
    cell.step(500)
    assert cell.pool.qpos[s, 2] < cell.cfg.belt_top + 0.05  # fell back onto the belt
    assert cell.metrics.dropped == 0


def test_suction_without_contact_picks_nothing():
    cell = _quiet_cell(belt_speed=0.0)
    s = cell.place_object(0, 0.0)
    stack = ControlStack(control_config(cell.cfg))
    _drive(cell, stack, (0.0, 0.0, cell.cfg.belt_top + 2 * cell.pool.half_h[s] + 0.04, 1), 800)
    assert cell.read().tool == 1.0 and not cell.read().holding


@pytest.mark.parametrize("to_instructed_bin", [True, False])
def test_object_released_over_a_bin_counts_by_the_instruction(to_instructed_bin):
    cell = _quiet_cell(belt_speed=0.0)
    cell.reset(0, instruction=[2, 0, 1])
    cell.spawn_limit = 0
    s = cell.place_object(0, 0.0)  # class 0 belongs in bin 2
    stack = _pick(cell, s)
    bx, by = cell.cfg.bin_center(2 if to_instructed_bin else 1)
    _drive(cell, stack, (0.0, 0.0, 0.5, 1), 500)
    _drive(cell, stack, (bx, by, 0.5, 1), 1000)
    _drive(cell, stack, (bx, by, 0.5, 0), 800)
    m = cell.metrics
    assert (m.correct, m.wrong) == ((1, 0) if to_instructed_bin else (0, 1))


def test_object_released_over_the_floor_counts_dropped():
    cell = _quiet_cell(belt_speed=0.0)
    s = cell.place_object(2, 0.2)
    stack = _pick(cell, s)
    _drive(cell, stack, (0.2, 0.0, 0.5, 1), 500)
    _drive(cell, stack, (0.2, -0.24, 0.5, 1), 800)  # beside the belt, away from the bins
    _drive(cell, stack, (0.2, -0.24, 0.5, 0), 1000)
    assert cell.metrics.dropped == 1 and cell.metrics.resolved == 1


def test_write_applies_forces_and_read_reports_motion():
    cell = _quiet_cell()
    cell.write(Command(np.array([50.0, 0.0, 0.0]), 0.0, np.zeros(3), np.zeros(3)))
    cell.step(50)
    st = cell.read()
    assert st.vel[0] > 0.1 and abs(st.vel[1]) < 1e-6 and st.t_ns == 50_000_000


def test_instruction_is_a_permutation_that_varies_with_seed():
    cell = ConveyorCell()
    seen = set()
    for seed in range(12):
        cell.reset(seed)
        assert sorted(cell.instruction.tolist()) == [0, 1, 2]
        seen.add(tuple(cell.instruction.tolist()))
    assert len(seen) > 1
    with pytest.raises(ValueError):
        cell.reset(0, instruction=[0, 0, 1])
