"""The shipped model directories: load, carry measured cards, keep 2:4 after export."""

import json
from pathlib import Path

import pytest

from rtinfer.model.directory import ModelDir

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo"
DENSE, SPARSE, MOE = ZOO / "conveyor-v1", ZOO / "conveyor-v1-sparse24", ZOO / "conveyor-v1-moe"
pytestmark = pytest.mark.skipif(not DENSE.is_dir(), reason="models/zoo/conveyor-v1 not built")
SIX = {"0,1,2", "0,2,1", "1,0,2", "1,2,0", "2,0,1", "2,1,0"}
TARGET = 0.98  # issue 16: every instruction, on episodes not used in training


@pytest.mark.parametrize("path", [DENSE, SPARSE, MOE], ids=["dense", "sparse24", "moe"])
def test_shipped_model_loads_and_its_card_holds_measured_success(path):
    md = ModelDir.load(path)
    card = json.loads((path / "card.json").read_text())
    assert set(card["success"]["seen_instructions"]) == {str(d) for d in md.config["exits"]} | {
        str(md.n_layer)
    }
    # Trained on all six instructions: the held-out test is scenes (episode seeds, belt speeds).
    scenes = card["success"]["held_out_scenes"]
    assert scenes["episode_seeds"] and set(card["success"]["belt_speed"]) == {
        str(v) for v in scenes["belt_speeds"]
    } == {"0.25", "0.35"}
    assert card["training"]["train_rows"] > 0


@pytest.mark.parametrize("path", [DENSE, SPARSE, MOE], ids=["dense", "sparse24", "moe"])
def test_shipped_model_sorts_every_instruction_as_its_card_records(path):
    md = ModelDir.load(path)
    card = json.loads((path / "card.json").read_text())
    full = card["success"]["seen_instructions"][str(md.n_layer)]
    per = full["per_instruction"]
    assert set(per) == SIX and set(card["success"]["trained_instructions"]) == SIX
    assert all(v["spawned"] >= 100 for v in per.values()), per
    low = {k: v["success_rate"] for k, v in per.items() if v["success_rate"] < TARGET}
    assert not low, f"instructions below {TARGET}: {low}"
    assert full["min_success_rate"] == min(v["success_rate"] for v in per.values())


def test_sparse_model_keeps_two_of_four_in_every_exported_block_weight():
    sparsity = pytest.importorskip("models.sparsity")
    checked = 0
    for onnx_file in sorted(SPARSE.glob("step_*.onnx")):
        blocks = {
            n: ok for n, ok in sparsity.check_onnx_24(onnx_file).items() if n.startswith("blocks.")
        }
        assert blocks and all(blocks.values()), onnx_file.name
        checked += len(blocks)
    assert checked > 0


def test_dense_model_is_not_accidentally_sparse():
    sparsity = pytest.importorskip("models.sparsity")
    blocks = {
        n: ok
        for n, ok in sparsity.check_onnx_24(DENSE / "step_d6_k1.onnx").items()
        if n.startswith("blocks.")
    }
    assert blocks and not all(blocks.values())


def test_bandwidth_floor_counts_the_shared_external_weights():
    """The shipped graphs keep their weights in one external file: the floor must count it
    (the graph file alone is ~65 KB of a 1.3 M-parameter model)."""
    from rtinfer.bench.backend import weight_bytes

    params = json.loads((DENSE / "policy.json").read_text())["meta"]["params"]
    assert 4 * params <= weight_bytes(DENSE) <= 4 * params * 1.1
