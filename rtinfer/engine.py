"""TensorRT engine builds from the exported ONNX step graphs (TensorRT 10.x and 11.x).

    rtinfer build-engine --model models/zoo/conveyor-v1-sparse24 --fp16 --sparse

The pure parts run anywhere and are unit-tested without TensorRT: `build_plan` (which
ONNX file, which builder flags, strongly typed or not, per TensorRT version), `cache_key`,
`profile_shapes`, the sparsity parsers (`sparse_layers` for engine-inspector JSON,
`sparse_from_log` for the build log) and `BuildLog`. `EngineBuilder` needs `tensorrt`,
torch (for the GPU name) and a GPU; both are imported only when a builder is created.

TensorRT 10 vs 11 (docs.nvidia.com "Migrating from TensorRT 10.x to 11.x"): 11 removes the
weak-typing precision flags (BuilderFlag.FP16/BF16/INT8...) and every network is strongly
typed, so FP16 must come from the ONNX types: our fp16/ graph set. On 10.x we build the
fp16 ONNX as STRONGLY_TYPED when it exists, else the fp32 ONNX with BuilderFlag.FP16
(weak typing: deprecated since 10.12, still works on JetPack 6's 10.3).
Engines and timing caches are only valid for the TensorRT version and GPU they were built
on, hence the cache key. Errors: BackendError (the inference boundary's one error type).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

from rtinfer.backends.base import BackendError

__all__ = ["BuildPlan", "build_plan", "cache_key", "profile_shapes", "assert_static",
           "parse_version", "BuildLog", "sparse_layers", "sparse_from_log", "gpu_identity",
           "EngineBuilder", "main"]


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


# --- build log and sparsity report (pure) ---------------------------------------------------
SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")
_ELIGIBLE = re.compile(r"Layers eligible for sparse math:\s*(.*)$")
_PICKED = re.compile(r"picked sparse implementation for layers:\s*(.*)$")


class BuildLog:
    """TensorRT builder messages at `min_severity` or worse, kept in `.lines` and appended to
    `path` as they arrive; `.counts` counts every severity (also the filtered ones).
    Thread-safe (TensorRT may log from its own threads). Close it (or use `with`)."""

    def __init__(self, path, min_severity: str = "INFO"):
        self.path, self.min = Path(path), SEVERITIES.index(min_severity)
        self.lines: list[str] = []
        self.counts = dict.fromkeys(SEVERITIES, 0)
        self._lock = threading.Lock()
        self._file = open(self.path, "w", encoding="utf-8")

    def log(self, severity: str, msg: str) -> None:
        sev = severity if severity in SEVERITIES else "INFO"
        with self._lock:
            self.counts[sev] += 1
            if SEVERITIES.index(sev) <= self.min and not self._file.closed:
                line = f"[{sev}] {msg}"
                self.lines.append(line)
                self._file.write(line + "\n")
                self._file.flush()

    def trt_logger(self, trt):
        """A trt.ILogger forwarding here (keep it alive as long as the builder/runtime)."""
        log = self.log

        class _Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)

            def log(self, severity, msg):
                log(getattr(severity, "name", str(severity)).rsplit(".", 1)[-1], str(msg))

        return _Logger()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> "BuildLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sparse_from_log(lines: Sequence[str]) -> dict[str, list[str]]:
    """Layer names from TensorRT's '(Sparsity) Layers eligible for sparse math: a, b' and
    '(Sparsity) TRT inference plan picked sparse implementation for layers: b' INFO lines."""
    out: dict[str, list[str]] = {"eligible": [], "picked": []}
    for line in lines:
        for key, rx in (("eligible", _ELIGIBLE), ("picked", _PICKED)):
            m = rx.search(line)
            if m:
                out[key] += [n.strip() for n in m.group(1).split(",") if n.strip()]
    return out


def sparse_layers(info) -> dict:
    """Parse IEngineInspector.get_engine_information(LayerInformationFormat.JSON) (a str or
    the decoded dict). A layer counts as sparse when its TacticName mentions "sparse" or it
    has a truthy sparsity field. Tolerates LAYER_NAMES_ONLY output (layers as strings), the
    TensorRT 10 and 11 schemas and junk: {"layers": n, "sparse": [...], "tactics": {...}}
    plus "error" when the input was unusable."""
    if isinstance(info, (str, bytes)):
        try:
            info = json.loads(info)
        except ValueError as e:
            return {"layers": 0, "sparse": [], "tactics": {}, "error": f"not JSON: {e}"}
    layers = info.get("Layers") if isinstance(info, dict) else info
    if not isinstance(layers, list):
        why = info.get("error") if isinstance(info, dict) else None
        return {"layers": 0, "sparse": [], "tactics": {}, "error": why or "no Layers list"}
    sparse, tactics = [], {}
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict):
            continue
        name = str(layer.get("Name", f"layer{i}"))
        tactic = layer.get("TacticName")
        if isinstance(tactic, str) and tactic:
            tactics[name] = tactic
        if (isinstance(tactic, str) and "sparse" in tactic.lower()) or _sparsity_field(layer):
            sparse.append(name)
    return {"layers": len(layers), "sparse": sparse, "tactics": tactics}


def _sparsity_field(layer: dict) -> bool:
    for k, v in layer.items():
        if "sparsit" in k.lower() or k.lower().startswith("sparse"):
            if isinstance(v, str):
                return v.strip().lower() not in ("", "none", "false", "0", "dense", "disabled")
            return bool(v)
    return False


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


class EngineBuilder:
    """Builds engines into `cache_dir` (<stem>-<key>.engine + .json report + .log build
    log) and reuses them when the cache key matches; one timing cache file per TensorRT
    version and GPU, shared by all builds. Blocks for seconds to minutes per graph
    (autotuning); not thread-safe."""

    def __init__(self, cache_dir, *, workspace_mb: int = 1024, opt_level: int = 3,
                 log_severity: str = "INFO"):
        try:
            import tensorrt as trt
        except ImportError as e:
            raise BackendError(f"tensorrt is not importable ({e}); on Jetson it ships with "
                               "JetPack, elsewhere pip install tensorrt") from None
        self.trt, self.version = trt, trt.__version__
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.workspace_mb, self.opt_level, self.log_severity = workspace_mb, opt_level, log_severity
        self.gpu_name, self.cc = gpu_identity()
        tag = f"{re.sub(r'[^A-Za-z0-9]+', '_', self.gpu_name)}-sm{self.cc[0]}{self.cc[1]}"
        self.timing_path = self.cache_dir / f"timing-trt{self.version}-{tag}.cache"
        self.builds = 0

    def build_model(self, md, *, fp16: bool, sparse: bool, force: bool = False) -> dict:
        """Engines for every (depth, k) graph of a ModelDir: {"plan", "trt_version", "gpu",
        "graphs": {"d{depth}_k{k}": report with "engine" path, "depth", "k"}}."""
        plan = build_plan(self.version, fp16, sparse, {key[0] for key in md.graphs})
        graphs = {}
        for (dtype, depth, k) in sorted(md.graphs):
            if dtype == plan.onnx_dtype:
                rep = self.build(md.graph_path(dtype, depth, k), plan, force=force)
                graphs[f"d{depth}_k{k}"] = {**rep, "depth": depth, "k": k}
        return {"plan": asdict(plan), "trt_version": self.version,
                "gpu": f"{self.gpu_name} (sm_{self.cc[0]}{self.cc[1]})", "graphs": graphs}

    def build(self, onnx_path, plan: BuildPlan, *, force: bool = False, ranges=None) -> dict:
        """Engine for one ONNX file: cached if its key matches, else built. Returns the
        build report (engine path, cached, sparse layers, build seconds, log path)."""
        onnx_path = Path(onnx_path)
        sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
        key = cache_key(sha, self.version, self.gpu_name, self.cc, plan,
                        workspace_mb=self.workspace_mb, opt_level=self.opt_level)
        stem = self.cache_dir / f"{onnx_path.stem}-{key}"
        engine, report = stem.with_suffix(".engine"), stem.with_suffix(".json")
        if engine.exists() and report.exists() and not force:
            return {**json.loads(report.read_text()), "cached": True}
        t0 = time.perf_counter()
        with BuildLog(stem.with_suffix(".log"), self.log_severity) as log:
            blob, info = self._build(onnx_path, plan, log, ranges)
        _atomic_write(engine, blob)
        rep = {"onnx": str(onnx_path), "engine": str(engine), "key": key,
               "build_s": round(time.perf_counter() - t0, 2), "log": str(log.path),
               "warnings": log.counts["WARNING"], "errors": log.counts["ERROR"],
               "inspector": sparse_layers(info), "sparse_log": sparse_from_log(log.lines)}
        _atomic_write(report, json.dumps(rep, indent=1).encode())
        self.builds += 1
        return {**rep, "cached": False}

    def _build(self, onnx_path: Path, plan: BuildPlan, log: BuildLog, ranges):
        trt = self.trt
        logger = log.trt_logger(trt)
        builder = trt.Builder(logger)
        flags = 0
        if plan.strongly_typed and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f"{onnx_path}: TensorRT cannot parse it: {errs}")
        shapes = {network.get_input(i).name: tuple(network.get_input(i).shape)
                  for i in range(network.num_inputs)}
        if ranges is None:
            assert_static(shapes)
        config = builder.create_builder_config()
        profiles = profile_shapes(shapes, ranges)
        if profiles:
            profile = builder.create_optimization_profile()
            for name, (lo, opt, hi) in profiles.items():
                profile.set_shape(name, lo, opt, hi)
            config.add_optimization_profile(profile)
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_mb << 20)
        config.builder_optimization_level = self.opt_level
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # tactic names for the report
        for name in plan.flags:
            flag = getattr(trt.BuilderFlag, name, None)
            if flag is None:
                raise BackendError(f"TensorRT {self.version} has no BuilderFlag.{name}; "
                                   "see rtinfer.engine.build_plan")
            config.set_flag(flag)
        self._attach_timing_cache(config, log)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise BackendError(f"{onnx_path}: TensorRT engine build failed; see {log.path}")
        _atomic_write(self.timing_path, memoryview(config.get_timing_cache().serialize()))
        return memoryview(blob), self._inspect(blob, logger)

    def _attach_timing_cache(self, config, log: BuildLog) -> None:
        data = self.timing_path.read_bytes() if self.timing_path.exists() else b""
        cache = config.create_timing_cache(data)
        if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
            log.log("WARNING", f"rtinfer: timing cache {self.timing_path} unusable; starting fresh")
            config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)

    def _inspect(self, blob, logger) -> str:
        trt = self.trt
        try:  # inspection is a report, never a reason to fail a good build
            engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
            return engine.create_engine_inspector().get_engine_information(
                trt.LayerInformationFormat.JSON)
        except Exception as e:  # TensorRT raises untyped errors across versions
            return json.dumps({"error": f"{type(e).__name__}: {e}"})


def _atomic_write(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)



def main(argv: Sequence[str] | None = None) -> int:
    """`rtinfer build-engine`: build (or find cached) engines for every graph of a model.
    --dry-run prints the plan only (works without tensorrt; --trt-version overrides)."""
    p = argparse.ArgumentParser(prog="rtinfer build-engine", description=main.__doc__)
    p.add_argument("--model", default="models/zoo/conveyor-v1", help="model directory")
    p.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--sparse", action=argparse.BooleanOptionalAction, default=True,
                   help="BuilderFlag.SPARSE_WEIGHTS (2:4 weights); same default as the backend")
    p.add_argument("--cache-dir", default=None, help="default: <model>/trt_cache")
    p.add_argument("--workspace-mb", type=int, default=1024)
    p.add_argument("--opt-level", type=int, default=3, help="builder optimization level 0-5")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--trt-version", default=None, help="plan for this version (dry run)")
    args = p.parse_args(argv)
    try:
        from rtinfer.modeldir import ModelDir
        md = ModelDir.load(args.model, check_hashes=False)
        dtypes = {key[0] for key in md.graphs}
        if args.dry_run:
            version = args.trt_version or _installed_trt_version()
            plan = build_plan(version, args.fp16, args.sparse, dtypes)
            print(json.dumps({"plan": asdict(plan), "graphs": len(
                [k for k in md.graphs if k[0] == plan.onnx_dtype])}, indent=1))
            return 0
        t0 = time.perf_counter()
        builder = EngineBuilder(args.cache_dir or md.path / "trt_cache",
                                workspace_mb=args.workspace_mb, opt_level=args.opt_level)
        report = builder.build_model(md, fp16=args.fp16, sparse=args.sparse, force=args.force)
        report["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(report, indent=1))
        return 0
    except BackendError as e:
        print(f"build-engine: {e}", file=sys.stderr)
        return 2


def _installed_trt_version() -> str:
    try:
        import tensorrt as trt
    except ImportError:
        raise BackendError("tensorrt is not installed; pass --trt-version for a dry run "
                           "or install TensorRT (JetPack ships it)") from None
    return trt.__version__


if __name__ == "__main__":
    sys.exit(main())
