"""Compute budget: levels from the model, monitor floor, own hysteresis on slack."""
from rtinfer.inference.budget import Budget, BudgetLevel, default_levels
from rtinfer.model.directory import ModelDir

MS = 1_000_000
LEVELS = [BudgetLevel(6, 7, 4), BudgetLevel(6, 7, 2), BudgetLevel(4, 0, 2), BudgetLevel(2, 0, 1)]


def test_default_levels_degrade_chunk_then_depth_with_card_accuracy(tiny_model_dir):
    levels = default_levels(ModelDir.load(tiny_model_dir), k_verify=4)
    assert levels[0] == BudgetLevel(3, 3, 3, 0.9)
    # H=3: half a chunk would be 1 waypoint; chunks never go below 2
    assert [lv.depth for lv in levels] == [3, 3, 2, 1]
    assert [lv.chunk for lv in levels] == [3, 2, 2, 2]
    assert levels[-1].accuracy == 0.5 and all(lv.spec_len == 0 for lv in levels[2:])


def test_low_slack_raises_the_level_at_once_and_calm_lowers_it_after_patience():
    b = Budget(LEVELS, 100 * MS, patience=3)
    assert b.update(10 * MS) == 1          # slack 10 ms < 20 ms: degrade immediately
    assert b.update(5 * MS) == 2
    assert b.update(30 * MS) == 2          # in the hysteresis band: stay
    assert [b.update(80 * MS) for _ in range(3)] == [2, 2, 1]
    assert [b.update(80 * MS) for _ in range(3)] == [1, 1, 0]
    assert b.switches == 4


def test_monitor_level_is_a_floor_and_zero_lifts_it():
    b = Budget(LEVELS, 100 * MS, patience=1)
    b.set_monitor_level(2)
    assert b.index == 2 and b.level == LEVELS[2]
    assert b.update(90 * MS) == 2          # own calm cannot go below the monitor's floor
    b.set_monitor_level(9)
    assert b.index == 3                    # clipped to the cheapest level
    b.set_monitor_level(0)
    assert b.index == 0


def test_auto_off_follows_only_the_monitor():
    b = Budget(LEVELS, 100 * MS, auto=False)
    assert b.update(0) == 0
    b.set_monitor_level(1)
    assert b.index == 1
