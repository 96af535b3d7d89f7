"""models.quantise's block size: a set written with larger blocks says so in graphs.json, its
KV-rows twins are quantised the same way (equal to their kv_out graphs to the bit), and a
block size MatMulNBits cannot take is refused with the choices."""

import shutil

import onnx
import pytest


def _block_sizes(path):
    return {
        a.i
        for n in onnx.load(str(path), load_external_data=False).graph.node
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "block_size"
    }


def test_a_larger_block_reaches_the_manifest_the_graphs_and_the_kv_rows_twins(
    tiny_model_dir, tmp_path
):
    from models.kv_rows import export_kv_rows
    from models.quantise import quantise, settings
    from rtinfer.model.manifest import read_manifest

    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    quantise(d, ("int4",), card=False, block_size=64, stream=d / "none.npz")
    man = read_manifest(d)
    assert settings(man, "int4") == {"bits": 4, "block_size": 64}
    assert settings(man, "int8") == {"bits": 8, "block_size": 32}  # not written: the default
    report = export_kv_rows(d, ("int4",))  # raises unless each twin equals its graph exactly
    assert report and set(report.values()) == {0.0}
    for g in read_manifest(d)["kv_rows"] + [g for g in man["graphs"] if g["dtype"] == "int4"]:
        assert _block_sizes(d / g["file"]) == {64}


def test_a_block_size_matmulnbits_cannot_take_is_refused(tiny_model_dir, tmp_path):
    from models.quantise import quantise

    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    with pytest.raises(ValueError, match="power of two"):
        quantise(d, ("int4",), card=False, block_size=48)
