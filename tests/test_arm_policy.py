"""The shipped reach-arm policy (models/zoo/arm-reach-bc): on the model-directory contract,
made for this robot, and, run on ONNX Runtime in lockstep against the MuJoCo arm through
the ControlStack, reaching most targets of target sequences it was not trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controllers.node import ControllerConfig
from examples.arm_reach.evaluate import evaluate
from examples.arm_reach.lockstep import action_spec, load_robot
from rtinfer.cli.check_model import problems
from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.directory import ModelError

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "zoo" / "arm-reach-bc"
ROBOT_SPEC = ROOT / "examples" / "arm_reach" / "action_spec.json"
_, CONTROL, _ = load_robot()


def test_shipped_model_passes_check_model_against_the_robots_spec():
    found, summary = problems(str(MODEL), robot_spec=str(ROBOT_SPEC))
    assert found == [] and summary["kind"] == "chunk"
    assert summary["inputs"] == ["joints", "ee", "target"]


def test_shipped_model_is_made_for_this_robot_and_small():
    spec = ActionSpec.load(MODEL / "action_spec.json")
    assert spec == action_spec(CONTROL) == ActionSpec.load(ROBOT_SPEC)
    ControllerConfig(CONTROL, action=spec)  # the controller's own check on connect
    assert sum(f.stat().st_size for f in MODEL.iterdir()) < 2_000_000


def test_card_records_the_training_and_the_lockstep_success():
    card = json.loads((MODEL / "card.json").read_text())
    training = card["lineage"]["training"]
    assert training["rows"] > 10_000 and training["val_rmse_rad"] < 0.02
    assert card["success"]["success_rate"] >= 0.9 and card["success"]["targets"] >= 100


def test_learned_policy_reaches_most_unseen_targets_in_lockstep_on_onnx_runtime():
    r = evaluate(str(MODEL), targets=15, seed=4242, latency_ms=10)
    assert r["targets"] == 15 and r["success_rate"] >= 0.8, r
    assert r["reach_s"]["p50"] < 1.5


def test_a_missing_model_is_one_clear_error():
    with pytest.raises(ModelError, match="no-such-model"):
        evaluate(str(ROOT / "models/zoo/no-such-model"), targets=1)
