"""TensorRT engine building: the pure parts (plan per TensorRT version, cache key, profile
shapes, sparsity report parsing, build log), which run everywhere without TensorRT/GPU."""
import enum
import importlib.util
import json
import threading
import types

import pytest
from hypothesis import given, strategies as st

from rtinfer.inference.backends import BackendError, get_backend
from rtinfer.inference.backends.tensorrt_build import main
from rtinfer.inference.backends.tensorrt_plan import (BuildLog, BuildPlan, assert_static, build_plan,
                                                      cache_key, parse_version, profile_shapes,
                                                      sparse_from_log, sparse_layers)

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
    assert (plan.onnx_dtype, plan.strongly_typed, plan.flags) == ("float16", True, ("SPARSE_WEIGHTS",))


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


@given(minor=st.integers(0, 20), fp16=st.booleans(), sparse=st.booleans(),
       dtypes=st.sampled_from([FP32, BOTH, {"float16"}]))
def test_trt11_plans_are_always_strongly_typed_without_precision_flags(minor, fp16, sparse, dtypes):
    try:
        plan = build_plan(f"11.{minor}.0", fp16, sparse, dtypes)
    except BackendError:
        return
    assert plan.strongly_typed and not PRECISION_FLAGS & set(plan.flags)
    assert (plan.onnx_dtype == "float16") == fp16


# --- cache_key -------------------------------------------------------------------------------
def _key(**over):
    args = dict(onnx_sha256="ab" * 32, trt_version="10.3.0", gpu_name="Orin", compute_capability=(8, 7),
                plan=build_plan("10.3.0", True, True, BOTH))
    args.update(over)
    return cache_key(**args, workspace_mb=1024, opt_level=3)


def test_cache_key_is_stable_and_changes_with_every_input():
    base = _key()
    assert base == _key() and len(base) == 24
    changed = [_key(onnx_sha256="cd" * 32), _key(trt_version="10.3.1"), _key(gpu_name="Thor"),
               _key(compute_capability=(8, 6)), _key(plan=build_plan("10.3.0", True, False, BOTH)),
               _key(plan=build_plan("10.3.0", True, True, FP32)),
               _key(plan=build_plan("10.3.0", False, True, BOTH))]
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
    assert prof == {"tokens": ((1, 1), (1, 4), (1, 16)),
                    "x": ((1, 8, 8), (2, 8, 8), (4, 8, 64))}


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
        {"Name": "/blocks.0/attn/c_attn/MatMul", "LayerType": "CaskGemmMatrixMultiply",
         "TacticName": "sm80_xmma_sparse_gemm_f16f16_f16f32_f32_nn_n_tilesize128x64x64", "TacticValue": "0x1"},
        {"Name": "/blocks.0/mlp/c_fc/MatMul", "LayerType": "CaskGemmMatrixMultiply",
         "TacticName": "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize64x64x64", "TacticValue": "0x2"},
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
    trt11 = {"Layers": [{"Name": "a", "TacticName": "sparse_gemm"}],
             "I/O Tensors": [{"Name": "tokens", "IOMode": "Input"}]}
    assert sparse_layers(trt11)["sparse"] == ["a"]
    assert sparse_layers(["x", "y"]) == {"layers": 2, "sparse": [], "tactics": {}}
    assert "not JSON" in sparse_layers("{oops")["error"]
    assert sparse_layers({"error": "RuntimeError: no inspector"})["error"].startswith("Runtime")
    assert sparse_layers({"Layers": 3})["sparse"] == []


def test_build_log_sparsity_lines_are_parsed():
    lines = ["[INFO] [TRT] (Sparsity) Layers eligible for sparse math: fc1, fc2 , fc3",
             "[INFO] unrelated",
             "[INFO] (Sparsity) TRT inference plan picked sparse implementation for layers: fc2"]
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
    assert (tmp_path / "b.log").read_text().splitlines() == \
        ["[WARNING] weights not 2:4", "[ERROR] out of memory"]
    assert log.counts == {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 1, "INFO": 2, "VERBOSE": 1}
    log.log("ERROR", "after close")  # counted, not written, no exception
    assert log.counts["ERROR"] == 2 and len(log.lines) == 2


def test_build_log_takes_messages_from_many_threads(tmp_path):
    with BuildLog(tmp_path / "b.log") as log:
        threads = [threading.Thread(target=lambda: [log.log("INFO", "m") for _ in range(200)])
                   for _ in range(4)]
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
    assert main(["--model", str(tiny_model_dir), "--dry-run", "--trt-version", "10.3.0",
                 "--fp16", "--sparse"]) == 0
    out = json.loads(capsys.readouterr().out)
    # 6 graphs, and the exit prefills (1, 12) and (2, 12) the tiny model is exported with
    assert out["plan"]["flags"] == ["FP16", "SPARSE_WEIGHTS"] and out["graphs"] == 8


def test_dry_run_for_trt11_fp16_without_fp16_graphs_fails_with_the_fix(tiny_model_dir, capsys):
    assert main(["--model", str(tiny_model_dir), "--dry-run", "--trt-version", "11.0.0"]) == 2
    assert "re-export with fp16=True" in capsys.readouterr().err
    assert main(["--model", str(tiny_model_dir), "--dry-run", "--trt-version", "11.0.0",
                 "--no-fp16"]) == 0


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
