"""TensorRT engine building: the pure parts (plan per TensorRT version, cache key, profile
shapes, sparsity report parsing, build log), which run everywhere without TensorRT/GPU."""

import enum
import importlib.util
import json
import threading
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtinfer.inference.backends import BackendError, get_backend
from rtinfer.inference.backends.tensorrt_build import main
from rtinfer.inference.backends.tensorrt_plan import (
    BuildLog,
    BuildPlan,
    assert_static,
    build_plan,
    cache_key,
    parse_version,
    profile_shapes,
    sparse_from_log,
    sparse_layers,
)

BOTH = {"float32", "float16"}
FP32 = {"float32"}
PRECISION_FLAGS = {"FP16", "BF16", "INT8", "FP8", "OBEY_PRECISION_CONSTRAINTS"}


# --- build_plan ------------------------------------------------------------------------------
def test_trt103_fp16_prefers_the_fp16_onnx_strongly_typed():
    plan = build_plan("10.3.0.30", want_fp16=True, sparse=False, onnx_dtypes_available=BOTH)
    assert (plan.onnx_dtype, plan.strongly_typed, plan.flags) == ("float16", True, ())


def test_trt103_fp16_without_fp16_graphs_uses_the_fp16_builder_flag():
    plan = build_plan("10.3.0", True, False, FP32)
    assert (plan.onnx_dtype, plan.strongly_typed, plan.flags) == ("float32", False, ("FP16",))
    assert not any("deprecated" in n for n in plan.notes)


def test_trt10_12_and_later_notes_weak_typing_is_deprecated():
    plan = build_plan("10.13.2", True, True, FP32)
    assert plan.flags == ("FP16", "SPARSE_WEIGHTS")
    assert any("deprecated" in n for n in plan.notes)


@pytest.mark.parametrize("version", ["11.0.0", "11.4.1.7"])
def test_trt11_fp16_needs_the_fp16_onnx(version):
    with pytest.raises(BackendError, match="fp16=True"):
        build_plan(version, True, False, FP32)
    plan = build_plan(version, True, True, BOTH)
    assert (plan.onnx_dtype, plan.strongly_typed, plan.flags) == (
        "float16",
        True,
        ("SPARSE_WEIGHTS",),
    )


@pytest.mark.parametrize("version", ["10.3.0", "10.13.0", "11.1.0"])
def test_fp32_builds_the_fp32_onnx_strongly_typed_without_precision_flags(version):
    plan = build_plan(version, False, False, BOTH)
    assert (plan.onnx_dtype, plan.strongly_typed, plan.flags) == ("float32", True, ())


def test_sparse_adds_sparse_weights_and_nothing_else():
    dense = build_plan("10.3.0", True, False, BOTH)
    sparse = build_plan("10.3.0", True, True, BOTH)
    assert set(sparse.flags) - set(dense.flags) == {"SPARSE_WEIGHTS"}


def test_tensorrt_older_than_10_and_garbage_versions_are_refused():
    with pytest.raises(BackendError, match="older than 10.0"):
        build_plan("8.6.2", True, False, BOTH)
    with pytest.raises(BackendError, match="cannot parse"):
        parse_version("ten.three")
    assert parse_version("10.3.0.30") == (10, 3) and parse_version("11") == (11, 0)


@given(
    minor=st.integers(0, 20),
    fp16=st.booleans(),
    sparse=st.booleans(),
    dtypes=st.sampled_from([FP32, BOTH, {"float16"}]),
)
def test_trt11_plans_are_always_strongly_typed_without_precision_flags(minor, fp16, sparse, dtypes):
    try:
        plan = build_plan(f"11.{minor}.0", fp16, sparse, dtypes)
    except BackendError:
        return
    assert plan.strongly_typed and not PRECISION_FLAGS & set(plan.flags)
    assert (plan.onnx_dtype == "float16") == fp16


# --- cache_key -------------------------------------------------------------------------------
def _key(**over):
    args = dict(
        onnx_sha256="ab" * 32,
        trt_version="10.3.0",
        gpu_name="Orin",
        compute_capability=(8, 7),
        plan=build_plan("10.3.0", True, True, BOTH),
    )
    args.update(over)
    return cache_key(**args, workspace_mb=1024, opt_level=3)


def test_cache_key_is_stable_and_changes_with_every_input():
    base = _key()
    assert base == _key() and len(base) == 24
    changed = [
        _key(onnx_sha256="cd" * 32),
        _key(trt_version="10.3.1"),
        _key(gpu_name="Thor"),
        _key(compute_capability=(8, 6)),
        _key(plan=build_plan("10.3.0", True, False, BOTH)),
        _key(plan=build_plan("10.3.0", True, True, FP32)),
        _key(plan=build_plan("10.3.0", False, True, BOTH)),
    ]
    assert len({base, *changed}) == len(changed) + 1
    plan = build_plan("10.3.0", True, True, BOTH)
    opts = cache_key("ab", "10.3.0", "Orin", (8, 7), plan, workspace_mb=512, opt_level=3)
    assert opts != base


def test_cache_key_ignores_option_order():
    plan = BuildPlan("10.3.0", "float16", True, ("SPARSE_WEIGHTS",))
    a = cache_key("x", "10.3.0", "g", (8, 7), plan, opt_level=3, workspace_mb=1)
    b = cache_key("x", "10.3.0", "g", (8, 7), plan, workspace_mb=1, opt_level=3)
    assert a == b


# --- shapes ----------------------------------------------------------------------------------
STATIC = {"tokens": (1, 4), "start_pos": (1,), "kv": (3, 2, 1, 2, 32, 16)}


def test_static_graphs_need_no_profile():
    assert_static(STATIC)
    assert profile_shapes(STATIC) == {}


def test_dynamic_inputs_get_min_opt_max_shapes():
    shapes = {**STATIC, "tokens": (1, -1), "x": (None, 8, -1)}
    prof = profile_shapes(shapes, {"tokens": {1: (1, 4, 16)}, "x": {0: (1, 2, 4), 2: (8, 8, 64)}})
    assert prof == {"tokens": ((1, 1), (1, 4), (1, 16)), "x": ((1, 8, 8), (2, 8, 8), (4, 8, 64))}


def test_dynamic_dims_without_ranges_or_with_bad_ranges_raise():
    with pytest.raises(BackendError, match="'tokens' has dynamic shape"):
        assert_static({**STATIC, "tokens": (1, -1)})
    with pytest.raises(BackendError, match="axis 1 is dynamic"):
        profile_shapes({"tokens": (1, -1)}, {})
    with pytest.raises(BackendError, match="min <= opt <= max"):
        profile_shapes({"tokens": (1, -1)}, {"tokens": {1: (8, 4, 16)}})


# --- sparsity report -------------------------------------------------------------------------
TRT10_INFO = {
    "Layers": [
        {
            "Name": "/blocks.0/attn/c_attn/MatMul",
            "LayerType": "CaskGemmMatrixMultiply",
            "TacticName": "sm80_xmma_sparse_gemm_f16f16_f16f32_f32_nn_n_tilesize128x64x64",
            "TacticValue": "0x1",
        },
        {
            "Name": "/blocks.0/mlp/c_fc/MatMul",
            "LayerType": "CaskGemmMatrixMultiply",
            "TacticName": "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize64x64x64",
            "TacticValue": "0x2",
        },
        {"Name": "/lm_head/MatMul", "Sparsity": "2:4"},
        {"Name": "/ln_f/LayerNorm", "Sparsity": "None"},
        "a layer name only",
    ],
    "Bindings": ["tokens", "start_pos", "kv", "logits", "kv_out"],
}


def test_inspector_json_reports_sparse_tactics_and_sparsity_fields():
    rep = sparse_layers(json.dumps(TRT10_INFO))
    assert rep["layers"] == 5
    assert rep["sparse"] == ["/blocks.0/attn/c_attn/MatMul", "/lm_head/MatMul"]
    assert rep["tactics"]["/blocks.0/mlp/c_fc/MatMul"].startswith("sm80_xmma_gemm")


def test_inspector_json_of_trt11_and_junk_is_parsed_defensively():
    trt11 = {
        "Layers": [{"Name": "a", "TacticName": "sparse_gemm"}],
        "I/O Tensors": [{"Name": "tokens", "IOMode": "Input"}],
    }
    assert sparse_layers(trt11)["sparse"] == ["a"]
    assert sparse_layers(["x", "y"]) == {"layers": 2, "sparse": [], "tactics": {}}
    assert "not JSON" in sparse_layers("{oops")["error"]
    assert sparse_layers({"error": "RuntimeError: no inspector"})["error"].startswith("Runtime")
    assert sparse_layers({"Layers": 3})["sparse"] == []


def test_build_log_sparsity_lines_are_parsed():
    lines = [
        "[INFO] [TRT] (Sparsity) Layers eligible for sparse math: fc1, fc2 , fc3",
        "[INFO] unrelated",
        "[INFO] (Sparsity) TRT inference plan picked sparse implementation for layers: fc2",
    ]
    assert sparse_from_log(lines) == {"eligible": ["fc1", "fc2", "fc3"], "picked": ["fc2"]}
    assert sparse_from_log([]) == {"eligible": [], "picked": []}


# --- build log -------------------------------------------------------------------------------
def test_build_log_writes_filtered_lines_and_counts_everything(tmp_path):
    with BuildLog(tmp_path / "b.log", "WARNING") as log:
        log.log("VERBOSE", "tactic timing")
        log.log("INFO", "building")
        log.log("WARNING", "weights not 2:4")
        log.log("ERROR", "out of memory")
        log.log("WEIRD", "unknown severity counts as INFO")
    assert (tmp_path / "b.log").read_text().splitlines() == [
        "[WARNING] weights not 2:4",
        "[ERROR] out of memory",
    ]
    assert log.counts == {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 1, "INFO": 2, "VERBOSE": 1}
    log.log("ERROR", "after close")  # counted, not written, no exception
    assert log.counts["ERROR"] == 2 and len(log.lines) == 2


def test_build_log_takes_messages_from_many_threads(tmp_path):
    with BuildLog(tmp_path / "b.log") as log:
        threads = [
            threading.Thread(target=lambda: [log.log("INFO", "m") for _ in range(200)])
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len((tmp_path / "b.log").read_text().splitlines()) == 800 == log.counts["INFO"]


def test_trt_logger_adapter_forwards_severity_names(tmp_path):
    class Severity(enum.Enum):  # stands in for trt.ILogger.Severity (a pybind enum with .name)
        WARNING = 2
        VERBOSE = 4

    class ILogger:
        def __init__(self):
            pass

    fake_trt = types.SimpleNamespace(ILogger=ILogger)
    with BuildLog(tmp_path / "b.log", "INFO") as log:
        adapter = log.trt_logger(fake_trt)
        assert isinstance(adapter, ILogger)
        adapter.log(Severity.WARNING, "careful")
        adapter.log(Severity.VERBOSE, "noise")
    assert log.lines == ["[WARNING] careful"] and log.counts["VERBOSE"] == 1


# --- CLI and backends without TensorRT -------------------------------------------------------
def test_dry_run_prints_the_plan_for_a_given_tensorrt_version(tiny_model_dir, capsys):
    assert (
        main(
            [
                "--model",
                str(tiny_model_dir),
                "--dry-run",
                "--trt-version",
                "10.3.0",
                "--fp16",
                "--sparse",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    # 6 graphs, and the exit prefills (1, 12) and (2, 12) the tiny model is exported with
    assert out["plan"]["flags"] == ["FP16", "SPARSE_WEIGHTS"] and out["graphs"] == 8


def test_dry_run_for_trt11_fp16_without_fp16_graphs_fails_with_the_fix(tiny_model_dir, capsys):
    assert main(["--model", str(tiny_model_dir), "--dry-run", "--trt-version", "11.0.0"]) == 2
    assert "re-export with fp16=True" in capsys.readouterr().err
    assert (
        main(["--model", str(tiny_model_dir), "--dry-run", "--trt-version", "11.0.0", "--no-fp16"])
        == 0
    )


def test_missing_model_dir_is_a_clean_cli_error(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "nope"), "--dry-run", "--trt-version", "10.3"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_tensorrt_backend_without_tensorrt_says_what_is_missing(tiny_model_dir):
    if importlib.util.find_spec("tensorrt"):
        pytest.skip("tensorrt is installed here")
    with pytest.raises(BackendError, match="tensorrt"):
        get_backend("tensorrt").load(tiny_model_dir)


def test_torch_sparse24_and_bad_dtype_are_refused_on_cpu(tiny_model_dir):
    pytest.importorskip("torch")
    with pytest.raises(BackendError, match="sparse24=True needs device='cuda'"):
        get_backend("torch").load(tiny_model_dir, device="cpu", sparse24=True)
    with pytest.raises(BackendError, match="dtype must be one of"):
        get_backend("torch").load(tiny_model_dir, device="cpu", dtype="int8")


# --- INT8 / FP8: explicit quantization from Q/DQ graphs --------------------------------------
QDQ = {"float32", "float16", "int8", "int4", "qdq-int8", "qdq-fp8"}


@pytest.mark.parametrize("version", ["10.3.0", "10.13.0", "11.0.0", "11.4.1"])
@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_int8_and_fp8_build_the_qdq_graphs_strongly_typed_without_precision_flags(
    version, precision
):
    plan = build_plan(version, True, False, QDQ, quantised=precision, compute_capability=(9, 0))
    assert plan.onnx_dtype == f"qdq-{precision}" and plan.precision == precision
    assert plan.strongly_typed and plan.flags == ()
    assert any("Q/DQ" in n for n in plan.notes)
    sparse = build_plan(version, True, True, QDQ, quantised=precision, compute_capability=(9, 0))
    assert sparse.flags == ("SPARSE_WEIGHTS",)


def test_orin_gets_int8_and_a_one_line_refusal_of_fp8():
    assert (
        build_plan(
            "10.3.0", True, True, QDQ, quantised="int8", compute_capability=(8, 7)
        ).onnx_dtype
        == "qdq-int8"
    )
    with pytest.raises(BackendError) as e:
        build_plan("10.3.0", True, True, QDQ, quantised="fp8", compute_capability=(8, 7))
    msg = str(e.value)
    assert "\n" not in msg and "FP8 needs compute capability 8.9" in msg and "sm_87" in msg
    assert "--precision int8" in msg
    for cc in ((8, 9), (9, 0), (10, 0)):  # Ada, Hopper, Blackwell
        assert build_plan("10.13.0", False, False, QDQ, "fp8", cc).precision == "fp8"


def test_a_dry_run_without_the_gpu_plans_fp8_and_says_it_is_checked_there():
    plan = build_plan("11.0.0", False, False, QDQ, quantised="fp8")
    assert any("checked on the GPU" in n for n in plan.notes)


def test_the_matmulnbits_int8_set_is_refused_with_the_qdq_fix():
    with pytest.raises(BackendError, match="MatMulNBits.*python -m models.qdq MODEL int8"):
        build_plan("10.3.0", True, False, {"float32", "int8", "int4"}, quantised="int8")
    with pytest.raises(BackendError, match="no qdq-fp8 graphs.*models.qdq MODEL fp8"):
        build_plan("11.1.0", True, False, FP32, quantised="fp8", compute_capability=(9, 0))
    with pytest.raises(BackendError, match="'int4' is unknown"):
        build_plan("10.3.0", True, False, QDQ, quantised="int4")


def test_cache_key_includes_the_precision():
    plans = [
        build_plan("10.3.0", True, True, QDQ),
        build_plan("10.3.0", False, True, QDQ),
        build_plan("10.3.0", True, True, QDQ, "int8", (9, 0)),
        build_plan("10.3.0", True, True, QDQ, "fp8", (9, 0)),
    ]
    assert [p.precision for p in plans] == ["fp16", "fp32", "int8", "fp8"]
    keys = {cache_key("ab", "10.3.0", "H200", (9, 0), p) for p in plans}
    assert len(keys) == 4
    # the same graph set and flags but another precision is another engine
    a = BuildPlan("10.3.0", "qdq-int8", True, (), (), "int8")
    b = BuildPlan("10.3.0", "qdq-int8", True, (), (), "fp8")
    assert cache_key("ab", "10.3.0", "g", (9, 0), a) != cache_key("ab", "10.3.0", "g", (9, 0), b)


def test_dry_run_plans_int8_for_a_model_with_a_qdq_set_and_refuses_fp8_on_orin(qdq_dir, capsys):
    qdq_dir = qdq_dir[0]
    assert (
        main(
            [
                "--model",
                str(qdq_dir),
                "--dry-run",
                "--trt-version",
                "10.3.0",
                "--precision",
                "int8",
                "--compute-capability",
                "8.7",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["onnx_dtype"] == "qdq-int8" and out["plan"]["precision"] == "int8"
    assert out["graphs"] == 8 and out["plan"]["flags"] == ["SPARSE_WEIGHTS"]
    assert (
        main(
            [
                "--model",
                str(qdq_dir),
                "--dry-run",
                "--trt-version",
                "10.3.0",
                "--precision",
                "fp8",
                "--compute-capability",
                "8.7",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FP8 needs compute capability 8.9" in err
    assert (
        main(
            ["--model", str(qdq_dir), "--dry-run", "--trt-version", "10.3.0", "--precision", "fp32"]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["plan"]["precision"] == "fp32"


@pytest.fixture(scope="module")
def qdq_dir(tiny_model_dir, tmp_path_factory):
    return make_qdq_dir(tiny_model_dir, tmp_path_factory)


def make_qdq_dir(tiny_model_dir, tmp_path_factory):
    """A copy of the tiny model with a recorded-style stream and its qdq-int8 set
    (models.qdq): (directory, qdq's report)."""
    pytest.importorskip("onnxruntime")
    import shutil

    from conftest import write_random_stream

    from models.qdq import qdq

    d = tmp_path_factory.mktemp("qdq") / "m"
    shutil.copytree(tiny_model_dir, d)
    write_random_stream(d, 6)
    return d, qdq(d, ("int8", "fp8"))


@pytest.mark.parametrize("dtype,agree", [("qdq-int8", 0.9), ("qdq-fp8", 0.8)])
def test_qdq_graphs_are_symmetric_and_compute_what_the_fp32_graphs_do(qdq_dir, dtype, agree):
    """Every graph of the qdq-int8 and qdq-fp8 sets has Q/DQ pairs with zero zero-points
    (TensorRT's rule: models.qdq.qdq_pairs raises otherwise) and, run by ONNX Runtime on the
    inputs it was calibrated on, picks the same next token as its fp32 graph almost
    everywhere.

    The Q/DQ graph is run as written (graph optimisations off: QuantizeLinear, then
    DequantizeLinear, then the fp32 op), which is the arithmetic TensorRT's explicit
    quantization implements, the same on every x86-64 CPU up to fp32 rounding. Left to
    optimise, ONNX Runtime fuses the pairs into QLinearMatMul, whose int8 kernels differ by CPU:
    exact with VNNI, but with AVX2 and no VNNI its u8s8 kernel saturates 16-bit pair sums, so
    the agreement fell to 0.867 on an AVX2-only EPYC against 0.975 here. The qdq sets are for
    TensorRT only (the CPU's int8 set is MatMulNBits), so those kernels are not under test."""
    import numpy as np
    import onnxruntime as ort

    from models.qdq import graph_feeds, qdq_pairs, sequences
    from rtinfer.model.directory import ModelDir

    qdq_dir, report = qdq_dir
    want, md = dtype, ModelDir.load(qdq_dir)
    assert report["int8"]["graphs"] == report["fp8"]["graphs"] == 8
    assert report["int8"]["qdq_pairs"] == report["fp8"]["qdq_pairs"] > 0
    seqs = sequences(md, qdq_dir / "stream.npz", cycles=3)
    as_written = ort.SessionOptions()
    as_written.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    same = total = 0
    for (dt, depth, k), g in md.graphs.items():
        if dt != want:
            continue
        assert qdq_pairs(qdq_dir / g["file"]) > 0
        ref = ort.InferenceSession(str(md.graph_path("float32", depth, k)))
        got = ort.InferenceSession(str(qdq_dir / g["file"]), as_written)
        for feed in graph_feeds(md.graph_path("float32", depth, k), seqs, md.vocab.special("PAD")):
            a, b = (s.run(["logits"], feed)[0].argmax(-1) for s in (ref, got))
            same, total = same + int((a == b).sum()), total + a.size
    assert total > 0 and same / total > agree, same / total
    scrambled = qdq_dir / want / "x.onnx"
    import onnx

    m = onnx.load(str(md.graph_path(want, md.n_layer, 1)))
    zp = next(t for t in m.graph.initializer if t.name.endswith("zero_point"))
    zp.CopyFrom(onnx.numpy_helper.from_array(np.ones_like(onnx.numpy_helper.to_array(zp)), zp.name))
    onnx.save(m, str(scrambled))
    with pytest.raises(ValueError, match="nonzero zero point"):
        qdq_pairs(scrambled)
