"""Quantised step graphs (models.quantise): int8 and int4 weight-only sets beside fp32, their
manifest entries and hashes, the backend's precision option, per-row rounding (what keeps
speculation exact), and the shipped model's sets against fp32 on its recorded stream."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import write_random_stream

from models.quantise import agreement, quantise
from models.share import share_weights
from rtinfer.inference.backends import get_backend
from rtinfer.model.directory import ModelDir, ModelError

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-v1"
QUANTISED = ("int8", "int4")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def quantised_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with shared fp32 weights, a recorded-style stream and both sets;
    returns (dir, sha256 of every fp32 file before quantising, quantise's report)."""
    d = tmp_path_factory.mktemp("q") / "m"
    shutil.copytree(tiny_model_dir, d)
    share_weights(d)
    write_random_stream(d, 8)
    before = {p.name: _sha(p) for p in d.iterdir() if p.suffix in (".onnx", ".bin")}
    return d, before, quantise(d, QUANTISED)


def test_each_set_has_its_own_folder_entries_and_hashes_and_fp32_is_untouched(quantised_dir):
    d, before, _ = quantised_dir
    man = json.loads((d / "graphs.json").read_text())
    by = {}
    for g in man["graphs"]:
        by.setdefault(g["dtype"], {})[(g["depth"], g["k"])] = g
    for prec in QUANTISED:
        assert set(by[prec]) == set(by["float32"])
        for g in by[prec].values():
            assert g["file"].startswith(f"{prec}/") and g["sha256"] == _sha(d / g["file"])
            assert {i["name"]: i["dtype"] for i in g["inputs"]}["kv"] == "float32"
        assert man["weights"][f"{prec}/weights.bin"] == _sha(d / prec / "weights.bin")
        assert man["quantised"][prec]["bits"] == int(prec[3:])
    assert {n: _sha(d / n) for n in before} == before


def test_quantised_graphs_are_matmulnbits_and_smaller_than_fp32(quantised_dir):
    d, _, report = quantised_dir
    for prec in QUANTISED:
        proto = onnx.load(str(d / prec / "step_d3_k1.onnx"), load_external_data=False)
        inits = {i.name for i in proto.graph.initializer}
        nbits = [n for n in proto.graph.node if n.op_type == "MatMulNBits"]
        bits = {a.i for n in nbits for a in n.attribute if a.name == "bits"}
        assert len(nbits) == 3 * 4 + 1 and bits == {int(prec[3:])}  # 4 Linear per block + head
        assert not [n for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    fp32 = sum(p.stat().st_size for p in d.iterdir() if p.suffix in (".onnx", ".bin"))
    assert report["int4"]["bytes"] < report["int8"]["bytes"] < fp32


def test_backend_runs_the_chosen_precision_with_a_float32_kv(quantised_dir):
    d, _, _ = quantised_dir
    be = get_backend("onnx").load(d, precision="int4")
    assert be.dtype == "int4" and be.kv().dtype == np.float32
    assert be.model.graph_path("int4", 3, 1).parent.name == "int4"
    with pytest.raises(ModelError, match="precision 'int3' is unknown.*fp32, fp16, int8, int4"):
        get_backend("onnx").load(d, precision="int3")
    with pytest.raises(ModelError, match="no float16 graphs"):
        get_backend("onnx").load(d, precision="fp16")


def test_a_corrupt_quantised_weights_file_is_refused_naming_it(quantised_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(quantised_dir[0], d)
    blob = bytearray((d / "int8" / "weights.bin").read_bytes())
    blob[100] ^= 0xFF
    (d / "int8" / "weights.bin").write_bytes(bytes(blob))
    get_backend("onnx").load(d, precision="int4")  # the other set is fine
    with pytest.raises(ModelError, match=r"int8/weights.bin: sha256 differs"):
        get_backend("onnx").load(d, precision="int8")


def _rows_depend_on_later_tokens(path, n_tokens: int, seed: int) -> bool:
    """Change the last half of a k-token step's tokens: do the first half's logits move?
    Causal attention cannot move them; only a scale taken across tokens can."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    kv_shape = next(i.shape for i in sess.get_inputs() if i.name == "kv")
    rng = np.random.default_rng(seed)
    kv = (0.5 * rng.standard_normal(kv_shape)).astype(np.float32)
    a = rng.integers(0, n_tokens, (1, 4))
    b = a.copy()
    b[0, 2:] = rng.integers(0, n_tokens, 2)
    run = lambda t: sess.run(["logits"], {"tokens": t, "start_pos": np.array([5]), "kv": kv})[0]  # noqa: E731
    return not np.array_equal(run(a)[0, :2], run(b)[0, :2])


def test_quantised_verify_rows_round_from_their_own_token_alone(quantised_dir, tmp_path):
    """What keeps speculation exact: a verify row is computed as if the other rows were not
    there. Dynamic activation quantisation (one scale from all k tokens) breaks it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    d, _, _ = quantised_dir
    V = ModelDir.load(d).config["vocab_size"]
    for prec in ("float32", *QUANTISED):
        sub = "" if prec == "float32" else f"{prec}/"
        assert not any(
            _rows_depend_on_later_tokens(d / f"{sub}step_d3_k4.onnx", V, s) for s in range(5)
        ), prec
    onnx.save(onnx.load(str(d / "step_d3_k4.onnx")), str(tmp_path / "fp32.onnx"))
    quantize_dynamic(tmp_path / "fp32.onnx", tmp_path / "dyn.onnx", weight_type=QuantType.QInt8)
    assert any(_rows_depend_on_later_tokens(tmp_path / "dyn.onnx", V, s) for s in range(5))


def test_agreement_is_measured_against_fp32_and_speculation_stays_exact(quantised_dir):
    d, _, report = quantised_dir
    for prec in QUANTISED:
        a = report[prec]["agreement"]
        assert a["cycles"] == 8 and a["tokens"] == 8 * 12 and a["speculative_identical"]
        assert 0.0 <= a["chunk_agreement"] <= a["token_agreement"] <= 1.0
    assert agreement(d, "fp32")["token_agreement"] == 1.0


def test_bench_decode_compares_precisions_in_one_run(quantised_dir):
    from rtinfer.bench.decode import precision_run

    r = precision_run(quantised_dir[0], ("fp32", "int8", "int4"), cycles=4, rounds=2)
    per = r["precisions"]
    assert per["fp32"]["ratio"] == 1.0 and per["fp32"]["token_agreement"] == 1.0
    assert all(per[p]["step_us"] > 0 and per[p]["ratio_min"] <= per[p]["ratio"] for p in per)


def test_node_refuses_a_precision_on_another_backend(capsys):
    from rtinfer.inference.node import main

    with pytest.raises(SystemExit) as e:
        main(
            [
                "--model",
                str(ZOO),
                "--obs",
                "ipc:///tmp/x",
                "--actions",
                "ipc:///tmp/y",
                "--backend",
                "torch",
                "--precision",
                "int8",
            ]
        )
    assert e.value.code == 2 and "--backend onnx" in capsys.readouterr().err


# --- the shipped model ----------------------------------------------------------------------
needs_zoo = pytest.mark.skipif(not (ZOO / "int8").is_dir(), reason="zoo int8/ set not built")


@pytest.mark.slow
@needs_zoo
@pytest.mark.parametrize("prec", QUANTISED)
def test_shipped_set_speculates_exactly_and_its_card_holds_the_measured_agreement(prec):
    """On the recorded stream (300 cycles): speculative greedy with either drafter equals
    plain greedy of the same quantised graphs token for token, and the card's agreement
    with fp32 is what the export code measures now (generated, not typed)."""
    measured = agreement(ZOO, prec)
    assert measured["speculative_identical"] and measured["cycles"] == 300
    assert measured["token_agreement"] > 0.98
    card = json.loads((ZOO / "card.json").read_text())["quantised"][prec]["agreement"]
    # another CPU's int8 kernels may round a near-tie differently: a point of slack, no more
    assert {k: card[k] for k in ("stream", "cycles", "tokens", "speculative_identical")} == {
        k: measured[k] for k in ("stream", "cycles", "tokens", "speculative_identical")
    }
    for k in ("token_agreement", "chunk_agreement", "first_token_agreement"):
        assert card[k] == pytest.approx(measured[k], abs=0.01), k


@needs_zoo
@pytest.mark.parametrize("prec", (*QUANTISED, "w8a8"))
def test_shipped_set_sorts_within_two_points_of_fp32(prec):
    s = json.loads((ZOO / "card.json").read_text())["quantised"][prec]["success"]
    assert s["float32_success_rate"] is not None and s["episodes"] * 6 * 20 == s["spawned"]
    assert s["success_rate"] >= s["float32_success_rate"] - 0.02


@needs_zoo
def test_shipped_quantised_sets_are_small():
    fp32 = sum(
        (ZOO / n).stat().st_size
        for n in ["policy.safetensors"] + [p.name for p in ZOO.glob("step_*.onnx")]
    )
    sizes = {p: sum(f.stat().st_size for f in (ZOO / p).iterdir()) for p in QUANTISED}
    assert sizes["int4"] < sizes["int8"] < fp32 / 2 and sum(sizes.values()) < 5e6, sizes
