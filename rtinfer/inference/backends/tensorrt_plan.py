"""TensorRT engine builds from the exported ONNX step graphs (TensorRT 10.x and 11.x).

The pure parts run anywhere and are unit-tested without TensorRT: `build_plan` (which
ONNX file, which builder flags, strongly typed or not, per TensorRT version), `cache_key`,
`profile_shapes`, the sparsity parsers (`sparse_layers` for engine-inspector JSON,
`sparse_from_log` for the build log) and `BuildLog`. `EngineBuilder` (in tensorrt_build)
needs `tensorrt`, torch (for the GPU name) and a GPU.

TensorRT 10 vs 11 (docs.nvidia.com "Migrating from TensorRT 10.x to 11.x"): 11 removes the
weak-typing precision flags (BuilderFlag.FP16/BF16/INT8...) and every network is strongly
typed, so FP16 must come from the ONNX types: our fp16/ graph set. On 10.x we build the
fp16 ONNX as STRONGLY_TYPED when it exists, else the fp32 ONNX with BuilderFlag.FP16
(weak typing: deprecated since 10.12, still works on JetPack 6's 10.3).
INT8 and FP8 (`quantised`): explicit quantization only, on both versions. The engine is built
from a Q/DQ graph set (qdq-int8/, qdq-fp8/: models.qdq) as a STRONGLY_TYPED network with no
precision flag, as NVIDIA's "Explicit Quantization" page asks ("precision-control build flags
are not required and should not be specified"); 11 has no BuilderFlag.INT8/FP8 and no
calibrator at all, and 10.x's implicit IInt8Calibrator path is deprecated, so it is not used.
FP8 needs compute capability 8.9+ (Ada, Hopper and later); Jetson Orin (sm_87) has INT8 only.
Engines and timing caches are only valid for the TensorRT version and GPU they were built
on, hence the cache key. Errors: BackendError (the inference boundary's one error type).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from rtinfer.inference.backends.base import BackendError
from rtinfer.inference.backends.tensorrt_log import BuildLog, sparse_from_log, sparse_layers  # noqa: F401 (re-exported)

__all__ = [
    "BuildPlan",
    "build_plan",
    "cache_key",
    "profile_shapes",
    "assert_static",
    "parse_version",
    "BuildLog",
    "sparse_layers",
    "sparse_from_log",
    "gpu_identity",
    "QUANTISED",
    "FP8_MIN_CC",
    "check_precision",
]

QUANTISED = {"int8": "qdq-int8", "fp8": "qdq-fp8"}  # precision -> graphs.json dtype of its Q/DQ set
FP8_MIN_CC = (8, 9)  # FP8 tensor cores: Ada (8.9), Hopper (9.0) and later


@dataclass(frozen=True)
class BuildPlan:
    """What to build: `onnx_dtype` picks the graph set ("float32", "float16" = fp16/,
    "qdq-int8", "qdq-fp8"), `flags` are trt.BuilderFlag names to set, `strongly_typed`
    selects the network flag, `precision` is the engine's (fp32, fp16, int8, fp8)."""

    trt_version: str
    onnx_dtype: str
    strongly_typed: bool
    flags: tuple[str, ...]
    notes: tuple[str, ...] = ()
    precision: str = ""


def parse_version(v: str) -> tuple[int, int]:
    """'10.3.0.30' -> (10, 3). Raises BackendError on anything unparsable."""
    try:
        major, minor = (v.split(".") + ["0"])[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        raise BackendError(f"cannot parse TensorRT version {v!r}") from None


def build_plan(
    trt_version: str,
    want_fp16: bool,
    sparse: bool,
    onnx_dtypes_available: Collection[str],
    quantised: str | None = None,
    compute_capability: Sequence[int] | None = None,
) -> BuildPlan:
    """Decide flags and source graphs for this TensorRT version. quantised: "int8" or "fp8"
    (want_fp16 is then not used), checked against compute_capability when given (None: a dry
    run without the GPU). Pure; raises BackendError with the fix when the wanted precision
    cannot be built from the available graphs or on that GPU."""
    major, minor = parse_version(trt_version)
    have = set(onnx_dtypes_available)
    if major < 10:
        raise BackendError(
            f"TensorRT {trt_version} is older than 10.0 (no name-based I/O "
            "API); JetPack 6.1+ ships 10.3: upgrade JetPack/TensorRT"
        )
    if quantised is not None:
        return _quantised_plan(trt_version, major, quantised, sparse, have, compute_capability)
    flags, notes = [], []
    if want_fp16 and "float16" in have:
        dtype, typed = "float16", True
        notes.append("fp16 from the fp16/ ONNX types (strongly typed)")
    elif want_fp16 and major >= 11:
        raise BackendError(
            f"TensorRT {trt_version} has no BuilderFlag.FP16 (strong typing "
            "only): fp16 needs the fp16/ ONNX graphs; re-export with fp16=True"
        )
    elif want_fp16:
        dtype, typed = "float32", False
        flags.append("FP16")
        notes.append(
            "no fp16/ graphs: fp32 ONNX + BuilderFlag.FP16 (weak typing"
            + (", deprecated since 10.12)" if minor >= 12 else ")")
        )
    elif "float32" in have:
        dtype, typed = "float32", True
    else:
        raise BackendError("fp32 engine wanted but the model has no float32 graphs; re-export")
    if sparse:
        flags.append("SPARSE_WEIGHTS")
    if major >= 11:
        notes.append("TensorRT 11: strong typing is always on")
    return BuildPlan(
        trt_version, dtype, typed, tuple(flags), tuple(notes), "fp16" if want_fp16 else "fp32"
    )


def check_precision(precision: str, compute_capability: Sequence[int]) -> None:
    """Raise BackendError (one line, with the fix) when this GPU cannot run `precision`."""
    cc = tuple(int(x) for x in compute_capability)
    if precision == "fp8" and cc < FP8_MIN_CC:
        raise BackendError(
            f"FP8 needs compute capability {FP8_MIN_CC[0]}.{FP8_MIN_CC[1]} or "
            f"later (Ada, Hopper); this GPU is sm_{cc[0]}{cc[1]}: build "
            "--precision int8 (Jetson Orin: INT8, no FP8) or fp16"
        )


def _quantised_plan(
    trt_version: str, major: int, precision: str, sparse: bool, have: set, compute_capability
) -> BuildPlan:
    if precision not in QUANTISED:
        raise BackendError(
            f"TensorRT precision {precision!r} is unknown; choose fp32, fp16, "
            f"{', '.join(QUANTISED)}"
        )
    if compute_capability is not None:
        check_precision(precision, compute_capability)
    dtype = QUANTISED[precision]
    if dtype not in have:
        why = (
            f"the model's {precision}/ set is ONNX Runtime's weight-only MatMulNBits (a "
            "com.microsoft op TensorRT cannot parse), and it has no Q/DQ set"
            if precision in have
            else f"the model has no {dtype} graphs"
        )
        raise BackendError(
            f"{precision.upper()} engines are built from Q/DQ graphs (explicit "
            f"quantization): {why}; write them with `python -m models.qdq "
            f"MODEL {precision}`"
        )
    notes = [
        f"{precision.upper()} from the Q/DQ nodes of the {dtype}/ graphs (explicit "
        "quantization, strongly typed, no precision flag); unquantised layers run at "
        "the ONNX's own types"
    ]
    if compute_capability is None and precision == "fp8":
        notes.append(f"FP8 needs sm_{FP8_MIN_CC[0]}{FP8_MIN_CC[1]}+: checked on the GPU")
    notes.append(
        "TensorRT 11: strong typing is always on; no BuilderFlag.INT8/FP8, no calibrator"
        if major >= 11
        else "the implicit IInt8Calibrator (deprecated in 10.x, removed in 11) is not used"
    )
    return BuildPlan(
        trt_version, dtype, True, ("SPARSE_WEIGHTS",) if sparse else (), tuple(notes), precision
    )


def cache_key(
    onnx_sha256: str,
    trt_version: str,
    gpu_name: str,
    compute_capability,
    plan: BuildPlan,
    **options,
) -> str:
    """Stable 24-hex-digit key of everything that makes an engine valid: the graph bytes,
    the TensorRT version, the GPU (name + compute capability), the plan's precision, flags and
    typing, and any extra build options (workspace, optimization level...)."""
    blob = json.dumps(
        {
            "onnx": onnx_sha256,
            "trt": trt_version,
            "gpu": gpu_name,
            "cc": list(compute_capability),
            "dtype": plan.onnx_dtype,
            "precision": plan.precision,
            "typed": plan.strongly_typed,
            "flags": sorted(plan.flags),
            "opts": {k: options[k] for k in sorted(options)},
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _dynamic_axes(shape: Sequence) -> list[int]:
    return [i for i, d in enumerate(shape) if d is None or int(d) < 0]


def assert_static(shapes: Mapping[str, Sequence]) -> None:
    """Raise BackendError naming the first input with a dynamic (-1/None) dimension."""
    for name, shape in shapes.items():
        if _dynamic_axes(shape):
            raise BackendError(
                f"input {name!r} has dynamic shape {list(shape)}; rtinfer graphs "
                "are static (re-export with models.export) or pass ranges"
            )


def profile_shapes(
    shapes: Mapping[str, Sequence],
    ranges: Mapping[str, Mapping[int, tuple[int, int, int]]] | None = None,
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(min, opt, max) shapes for an optimization profile, for inputs with dynamic dims only
    ({} when everything is static: no profile needed). ranges: {input: {axis: (min, opt, max)}}.
    A dynamic axis without a range, or min > opt > max, raises BackendError."""
    out = {}
    for name, shape in shapes.items():
        axes = _dynamic_axes(shape)
        if not axes:
            continue
        per = (ranges or {}).get(name, {})
        lo, opt, hi = ([-1 if d is None else int(d) for d in shape] for _ in range(3))
        for a in axes:
            if a not in per:
                raise BackendError(f"input {name!r} axis {a} is dynamic but has no (min, opt, max)")
            mn, op, mx = per[a]
            if not 1 <= mn <= op <= mx:
                raise BackendError(
                    f"input {name!r} axis {a}: need 1 <= min <= opt <= max, got {per[a]}"
                )
            lo[a], opt[a], hi[a] = mn, op, mx
        out[name] = (tuple(lo), tuple(opt), tuple(hi))
    return out


# --- building (needs tensorrt + a GPU) ------------------------------------------------------
def gpu_identity() -> tuple[str, tuple[int, int]]:
    """(GPU name, compute capability) of CUDA device 0, via torch."""
    try:
        import torch
    except ImportError:
        raise BackendError("engine builds need torch (CUDA) to identify the GPU") from None
    if not torch.cuda.is_available():
        raise BackendError("no CUDA device: TensorRT engines are built on the target GPU")
    return torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0))
