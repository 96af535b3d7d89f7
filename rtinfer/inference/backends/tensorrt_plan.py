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
Engines and timing caches are only valid for the TensorRT version and GPU they were built
on, hence the cache key. Errors: BackendError (the inference boundary's one error type).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from rtinfer.inference.backends.base import BackendError
from rtinfer.inference.backends.tensorrt_log import BuildLog, sparse_from_log, sparse_layers  # noqa: F401 (re-exported)


__all__ = ["BuildPlan", "build_plan", "cache_key", "profile_shapes", "assert_static",
           "parse_version", "BuildLog", "sparse_layers", "sparse_from_log", "gpu_identity"]


@dataclass(frozen=True)
class BuildPlan:
    """What to build: `onnx_dtype` picks the graph set ("float32" or "float16" = fp16/),
    `flags` are trt.BuilderFlag names to set, `strongly_typed` selects the network flag."""
    trt_version: str
    onnx_dtype: str
    strongly_typed: bool
    flags: tuple[str, ...]
    notes: tuple[str, ...] = ()


def parse_version(v: str) -> tuple[int, int]:
    """'10.3.0.30' -> (10, 3). Raises BackendError on anything unparsable."""
    try:
        major, minor = (v.split(".") + ["0"])[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        raise BackendError(f"cannot parse TensorRT version {v!r}") from None


def build_plan(trt_version: str, want_fp16: bool, sparse: bool,
               onnx_dtypes_available: Collection[str]) -> BuildPlan:
    """Decide flags and source graphs for this TensorRT version. Pure; raises BackendError
    with the fix when the wanted precision cannot be built from the available graphs."""
    major, minor = parse_version(trt_version)
    have = set(onnx_dtypes_available)
    if major < 10:
        raise BackendError(f"TensorRT {trt_version} is older than 10.0 (no name-based I/O "
                           "API); JetPack 6.1+ ships 10.3: upgrade JetPack/TensorRT")
    flags, notes = [], []
    if want_fp16 and "float16" in have:
        dtype, typed = "float16", True
        notes.append("fp16 from the fp16/ ONNX types (strongly typed)")
    elif want_fp16 and major >= 11:
        raise BackendError(f"TensorRT {trt_version} has no BuilderFlag.FP16 (strong typing "
                           "only): fp16 needs the fp16/ ONNX graphs; re-export with fp16=True")
    elif want_fp16:
        dtype, typed = "float32", False
        flags.append("FP16")
        notes.append("no fp16/ graphs: fp32 ONNX + BuilderFlag.FP16 (weak typing"
                     + (", deprecated since 10.12)" if minor >= 12 else ")"))
    elif "float32" in have:
        dtype, typed = "float32", True
    else:
        raise BackendError("fp32 engine wanted but the model has no float32 graphs; re-export")
    if sparse:
        flags.append("SPARSE_WEIGHTS")
    if major >= 11:
        notes.append("TensorRT 11: strong typing is always on")
    return BuildPlan(trt_version, dtype, typed, tuple(flags), tuple(notes))


def cache_key(onnx_sha256: str, trt_version: str, gpu_name: str, compute_capability,
              plan: BuildPlan, **options) -> str:
    """Stable 24-hex-digit key of everything that makes an engine valid: the graph bytes,
    the TensorRT version, the GPU (name + compute capability), the plan's flags and typing,
    and any extra build options (workspace, optimization level...)."""
    blob = json.dumps({"onnx": onnx_sha256, "trt": trt_version, "gpu": gpu_name,
                       "cc": list(compute_capability), "dtype": plan.onnx_dtype,
                       "typed": plan.strongly_typed, "flags": sorted(plan.flags),
                       "opts": {k: options[k] for k in sorted(options)}}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _dynamic_axes(shape: Sequence) -> list[int]:
    return [i for i, d in enumerate(shape) if d is None or int(d) < 0]


def assert_static(shapes: Mapping[str, Sequence]) -> None:
    """Raise BackendError naming the first input with a dynamic (-1/None) dimension."""
    for name, shape in shapes.items():
        if _dynamic_axes(shape):
            raise BackendError(f"input {name!r} has dynamic shape {list(shape)}; rtinfer graphs "
                               "are static (re-export with models.export) or pass ranges")


def profile_shapes(shapes: Mapping[str, Sequence],
                   ranges: Mapping[str, Mapping[int, tuple[int, int, int]]] | None = None
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
                raise BackendError(f"input {name!r} axis {a}: need 1 <= min <= opt <= max, "
                                   f"got {per[a]}")
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
