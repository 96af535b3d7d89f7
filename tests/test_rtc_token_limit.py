"""An action-token model's max_committed lives in its card.json (its tokenizer.json has no
place for it): the robot reads it there, so it never commits more than the node accepts
(more would be refused as committed_too_long instead of committed shorter)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from controllers.robot_files import card_max_committed
from controllers.rtc import Commitments, RtcConfig

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-v1"


def token_dir(tmp_path: Path, card: dict | None) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(ZOO / "tokenizer.json", d / "tokenizer.json")
    if card is not None:
        (d / "card.json").write_text(json.dumps(card))
    return d


def test_a_token_models_card_limit_caps_what_the_robot_commits(tmp_path):
    d = token_dir(tmp_path, {"name": "t", "max_committed": 2})
    assert card_max_committed(d) == 2
    horizon = json.loads((d / "tokenizer.json").read_text())["horizon"]
    rtc = Commitments(RtcConfig(max_committed=card_max_committed(d)), horizon, 4)
    assert rtc.max_n == 2
    assert Commitments(RtcConfig(), horizon, 4).max_n == horizon - 1  # none declared


def test_no_card_limit_leaves_the_action_spec_or_the_horizon(tmp_path):
    assert card_max_committed(token_dir(tmp_path, {"name": "t"})) is None
    assert card_max_committed(tmp_path / "m" / "tokenizer.json") is None  # a file, not a dir
    assert Commitments(RtcConfig(max_committed=None), 16, 4, 8).max_n == 8  # the spec's


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_a_card_limit_that_is_not_a_count_is_refused_with_the_file(tmp_path, bad):
    d = token_dir(tmp_path, {"max_committed": bad})
    with pytest.raises(ValueError, match="card.json: max_committed"):
        card_max_committed(d)


def test_a_negative_limit_in_the_robot_config_is_refused():
    with pytest.raises(ValueError, match="max_committed=-2 must be >= 0"):
        RtcConfig(max_committed=-2)


def test_the_node_reads_the_same_card_and_refuses_the_same_bad_limit(tmp_path):
    """One reader (rtinfer.model.card) for both sides: the node's model directory refuses
    the card the robot refuses, naming the file, and reads the limit the robot reads."""
    from rtinfer.model.directory import ModelDir, ModelError

    d = tmp_path / "zoo"
    shutil.copytree(ZOO, d)
    card = json.loads((d / "card.json").read_text()) if (d / "card.json").exists() else {}
    (d / "card.json").write_text(json.dumps({**card, "max_committed": 3}))
    assert ModelDir.load(d, check_hashes=False).card["max_committed"] == 3 == card_max_committed(d)
    (d / "card.json").write_text(json.dumps({**card, "max_committed": "3"}))
    with pytest.raises(ModelError, match="card.json: max_committed '3' must be an integer"):
        ModelDir.load(d, check_hashes=False)
