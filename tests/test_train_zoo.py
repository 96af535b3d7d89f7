"""The policies trained beside conveyor-v1: the larger one (>= 5 M params) and the draft
model load, share conveyor-v1's vocab and layout, and carry their measured cards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtinfer.model.directory import ModelDir

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo"
SHIPPED, LARGE, DRAFT = ZOO / "conveyor-v1", ZOO / "conveyor-v1-large", ZOO / "conveyor-v1-draft"
SIX = {"0,1,2", "0,2,1", "1,0,2", "1,2,0", "2,0,1", "2,1,0"}


def _card(path: Path) -> dict:
    return json.loads((path / "card.json").read_text())


@pytest.mark.parametrize("path", [LARGE, DRAFT], ids=["large", "draft"])
def test_trained_model_shares_the_shipped_vocab_and_tokenizer(path):
    md, ship = ModelDir.load(path), ModelDir.load(SHIPPED)
    assert md.vocab == ship.vocab
    assert (path / "tokenizer.json").read_text() == (SHIPPED / "tokenizer.json").read_text()
    assert (path / "obs_tokens.json").read_text() == (SHIPPED / "obs_tokens.json").read_text()
    ref = _card(path)["reference"]
    assert ref["reference"] == "conveyor-v1" and ref["cycles"] > 0
    assert 0.0 < ref["acceptance"] <= 1.0 and ref["step_us"]["model"]["p50_us"] > 0


def test_large_policy_has_five_million_params_and_success_on_all_six_instructions():
    card = _card(LARGE)
    assert card["params"] >= 5_000_000
    assert card["training"]["grown_from"]["params"] == _card(SHIPPED)["params"]
    full = card["success"]["seen_instructions"][str(card["config"]["n_layer"])]
    assert set(full["per_instruction"]) == SIX
    assert all(v["spawned"] > 0 for v in full["per_instruction"].values())
    for prec in ("int8", "int4"):
        agree = card["quantised"][prec]["agreement"]
        assert agree["speculative_identical"] and agree["token_agreement"] > 0.9


def test_draft_model_is_small_and_full_depth_only():
    card = _card(DRAFT)
    assert card["params"] < _card(SHIPPED)["params"] / 3
    assert card["config"]["exits"] == [] and card["training"]["teacher"].endswith(
        "conveyor-v1/policy"
    )
