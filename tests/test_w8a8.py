"""The w8a8 set (models.w8a8): int8 weights per output channel and int8 activations per token.
Its MatMuls are integer GEMMs, a token's rounding never depends on the other tokens of its
step (so speculation stays exact), its KV-rows twins and shared-k graphs are made from it as
for the other sets, and adding it to a directory leaves every other set as it was."""

import hashlib
import json
import shutil

import numpy as np
import onnx
import pytest
from conftest import write_random_stream
from test_quantised import _rows_depend_on_later_tokens

from models.kv_rows import export_kv_rows
from models.quantise import agreement, quantise
from models.share import share_weights
from models.shared_k import TOLERANCE, export_shared_k
from rtinfer.inference.backends import get_backend
from rtinfer.model.directory import ModelDir
from rtinfer.model.zoo import zoo_model


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def w8_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with shared weights, a stream, an int4 set with its KV-rows twins, then
    the w8a8 set; returns (dir, sha256 of every file before w8a8, quantise's report)."""
    d = tmp_path_factory.mktemp("w8") / "m"
    shutil.copytree(tiny_model_dir, d)
    share_weights(d)
    write_random_stream(d, 8)
    quantise(d, ("int4",), card=False)
    export_kv_rows(d, ("int4",))
    before = {str(p.relative_to(d)): _sha(p) for p in d.rglob("*") if p.suffix in (".onnx", ".bin")}
    return d, before, quantise(d, ("w8a8",), card=False)


def test_w8a8_is_a_set_of_its_own_and_the_others_are_untouched(w8_dir):
    d, before, report = w8_dir
    man = json.loads((d / "graphs.json").read_text())
    fp32 = {(g["depth"], g["k"]) for g in man["graphs"] if g["dtype"] == "float32"}
    mine = [g for g in man["graphs"] if g["dtype"] == "w8a8"]
    assert {(g["depth"], g["k"]) for g in mine} == fp32
    assert all(g["file"].startswith("w8a8/") and g["sha256"] == _sha(d / g["file"]) for g in mine)
    assert man["weights"]["w8a8/weights.bin"] == _sha(d / "w8a8" / "weights.bin")
    assert "per token" in man["quantised"]["w8a8"]["method"]
    assert {n: _sha(d / n) for n in before} == before
    assert report["w8a8"]["agreement"]["speculative_identical"]


def test_every_weight_matmul_is_an_integer_gemm_with_int8_weights(w8_dir):
    d = w8_dir[0]
    proto = onnx.load(str(d / "w8a8" / "step_d3_k1.onnx"))
    inits = {i.name: i for i in proto.graph.initializer}
    mmi = [n for n in proto.graph.node if n.op_type == "MatMulInteger"]
    assert len(mmi) == 3 * 4 + 1  # 4 Linear per block + the head
    assert {inits[n.input[1]].data_type for n in mmi} == {onnx.TensorProto.INT8}
    assert not [n for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] in inits]


def test_a_verify_row_rounds_from_its_own_token_alone(w8_dir):
    """What keeps speculation exact, as for MatMulNBits (test_quantised): changing the later
    tokens of a step never moves the earlier ones' logits."""
    d = w8_dir[0]
    V = ModelDir.load(d).config["vocab_size"]
    assert not any(
        _rows_depend_on_later_tokens(d / "w8a8" / "step_d3_k4.onnx", V, s) for s in range(5)
    )


def test_agreement_with_fp32_is_measured_and_speculation_is_exact(w8_dir):
    a = w8_dir[2]["w8a8"]["agreement"]
    assert a["cycles"] == 8 and a["speculative_identical"]
    assert 0.0 <= a["chunk_agreement"] <= a["token_agreement"] <= 1.0
    be = get_backend("onnx").load(w8_dir[0], precision="w8a8")
    assert be.dtype == "w8a8" and be.kv().dtype == np.float32


def test_kv_rows_twins_and_shared_graphs_are_made_from_it(w8_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(w8_dir[0], d)
    int4_twins = json.loads((d / "graphs.json").read_text())["kv_rows"]
    report = export_kv_rows(d, ("w8a8",))  # raises unless each twin equals its graph exactly
    assert report and set(report.values()) == {0.0}
    twins = json.loads((d / "graphs.json").read_text())["kv_rows"]
    assert [g for g in twins if g["dtype"] == "int4"] == int4_twins  # the int4 twins stay
    assert all((d / g["file"]).is_file() for g in twins)
    shared = export_shared_k(d, ("w8a8",))
    assert shared and max(shared.values()) <= TOLERANCE
    rows = get_backend("onnx").load(d, precision="w8a8")  # the twins: complete for w8a8
    assert rows._new
    quantise(d, ("w8a8",), card=False)  # the set again: its old twins went with its folder
    man = json.loads((d / "graphs.json").read_text())
    assert [g["dtype"] for g in man["kv_rows"]] == ["int4"] * len(int4_twins)
    assert not [g for g in man.get("shared_k", []) if g["dtype"] == "w8a8"]
    assert get_backend("onnx").load(d, precision="w8a8")._new == {}  # loads, static graphs


@pytest.mark.slow
def test_shipped_w8a8_set_speculates_exactly_and_its_card_holds_the_measured_agreement():
    zoo = zoo_model("conveyor-v1")
    measured = agreement(zoo, "w8a8")
    assert measured["speculative_identical"] and measured["cycles"] == 300
    card = json.loads((zoo / "card.json").read_text())["quantised"]["w8a8"]["agreement"]
    for k in ("token_agreement", "chunk_agreement", "first_token_agreement"):
        assert card[k] == pytest.approx(measured[k], abs=0.01), k
