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
    assert b.update(10 * MS) == 1  # slack 10 ms < 20 ms: degrade immediately
    assert b.update(5 * MS) == 2
    assert b.update(30 * MS) == 2  # in the hysteresis band: stay
    assert [b.update(80 * MS) for _ in range(3)] == [2, 2, 1]
    assert [b.update(80 * MS) for _ in range(3)] == [1, 1, 0]
    assert b.switches == 4


def test_monitor_level_is_a_floor_and_zero_lifts_it():
    b = Budget(LEVELS, 100 * MS, patience=1)
    b.set_monitor_level(2)
    assert b.index == 2 and b.level == LEVELS[2]
    assert b.update(90 * MS) == 2  # own calm cannot go below the monitor's floor
    b.set_monitor_level(9)
    assert b.index == 3  # clipped to the cheapest level
    b.set_monitor_level(0)
    assert b.index == 0


def test_auto_off_follows_only_the_monitor():
    b = Budget(LEVELS, 100 * MS, auto=False)
    assert b.update(0) == 0
    b.set_monitor_level(1)
    assert b.index == 1


def _measured(tiny_model_dir, tmp_path, levels):
    """The tiny model with a card that says each level's lockstep success and chunk cost."""
    import json
    import shutil

    d = tmp_path / "measured"
    shutil.copytree(tiny_model_dir, d)
    card = json.loads((d / "card.json").read_text())
    card["level_success"] = {
        "late": 0.3,
        "levels": [
            {
                "depth": depth,
                "spec_len": spec,
                "chunk": chunk,
                "gate": None,
                "success_rate": ok,
                "chunk_cpu_ms": ms,
            }
            for depth, spec, chunk, ok, ms in levels
        ],
    }
    (d / "card.json").write_text(json.dumps(card))
    return ModelDir.load(d)


def test_measured_success_orders_the_ladder_and_a_level_a_cheaper_one_beats_gives_way(
    tiny_model_dir, tmp_path
):
    md = _measured(
        tiny_model_dir,
        tmp_path,
        [
            (3, 3, 3, 1.0, 4.0),  # full quality
            (3, 3, 2, 0.80, 3.0),  # half chunk: cheaper, sorts worse
            (2, 0, 2, 0.95, 3.5),  # exit 2, half chunk: beaten by exit 2 at the full chunk
            (1, 0, 2, 0.60, 2.0),  # the cheapest: poor, but nothing cheaper sorts better
            (2, 0, 3, 0.98, 3.2),  # exit 2 at the full chunk: not in the static ladder
            (1, 0, 3, 0.99, 4.5),
        ],
    )  # dearer than full quality: saves nothing
    levels = default_levels(md, k_verify=4)
    assert [(lv.depth, lv.chunk) for lv in levels] == [(3, 3), (2, 3), (3, 2), (1, 2)]
    assert [lv.accuracy for lv in levels] == [1.0, 0.98, 0.80, 0.60]
    assert [lv.spec_len for lv in levels] == [3, 0, 3, 0]


def test_a_card_that_did_not_measure_every_candidate_keeps_the_static_ladder(
    tiny_model_dir, tmp_path
):
    static = default_levels(ModelDir.load(tiny_model_dir), k_verify=4)
    md = _measured(tiny_model_dir, tmp_path, [(3, 3, 3, 1.0, 4.0), (1, 0, 2, 0.99, 1.0)])
    assert default_levels(md, k_verify=4) == static
