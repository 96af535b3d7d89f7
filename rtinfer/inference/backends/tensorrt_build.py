"""EngineBuilder: TensorRT engine builds with an engine cache and a shared timing cache.

Needs `tensorrt`, torch (to name the GPU) and a GPU, imported when a builder is created.

    rtinfer build-engine --model models/zoo/conveyor-v1-sparse24 --fp16 --sparse
    rtinfer build-engine --model models/zoo/conveyor-v1 --precision int8   # Q/DQ set: models.qdq

The plan (flags, ONNX variant, strong typing) and the cache key come from tensorrt_plan.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rtinfer.inference.backends.base import BackendError, ModelError
from rtinfer.inference.backends.tensorrt_log import BuildLog, sparse_from_log, sparse_layers
from rtinfer.inference.backends.tensorrt_plan import (
    QUANTISED,
    BuildPlan,
    assert_static,
    build_plan,
    cache_key,
    gpu_identity,
    profile_shapes,
)
from rtinfer.model.directory import ModelDir
from rtinfer.realtime.complaints import say


class EngineBuilder:
    """Builds engines into `cache_dir` (<stem>-<key>.engine + .json report + .log build
    log) and reuses them when the cache key matches; one timing cache file per TensorRT
    version and GPU, shared by all builds. Blocks for seconds to minutes per graph
    (autotuning); not thread-safe."""

    def __init__(
        self, cache_dir, *, workspace_mb: int = 1024, opt_level: int = 3, log_severity: str = "INFO"
    ):
        try:
            import tensorrt as trt
        except ImportError as e:
            raise BackendError(
                f"tensorrt is not importable ({e}); on Jetson it ships with "
                "JetPack, elsewhere pip install tensorrt"
            ) from None
        self.trt, self.version = trt, trt.__version__
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.workspace_mb, self.opt_level, self.log_severity = workspace_mb, opt_level, log_severity
        self.gpu_name, self.cc = gpu_identity()
        tag = f"{re.sub(r'[^A-Za-z0-9]+', '_', self.gpu_name)}-sm{self.cc[0]}{self.cc[1]}"
        self.timing_path = self.cache_dir / f"timing-trt{self.version}-{tag}.cache"
        self.builds = 0

    def build_model(
        self, md, *, fp16: bool, sparse: bool, force: bool = False, precision: str | None = None
    ) -> dict:
        """Engines for every (depth, k) graph of a ModelDir: {"plan", "trt_version", "gpu",
        "graphs": {"d{depth}_k{k}": report with "engine" path, "depth", "k"}}. precision:
        "int8" or "fp8" builds the Q/DQ set (fp16 unused), refused on a GPU without it."""
        plan = build_plan(
            self.version,
            fp16,
            sparse,
            {key[0] for key in md.graphs},
            quantised=precision,
            compute_capability=self.cc,
        )
        graphs = {}
        for dtype, depth, k in sorted(md.graphs):
            if dtype == plan.onnx_dtype:
                rep = self.build(md.graph_path(dtype, depth, k), plan, force=force)
                graphs[f"d{depth}_k{k}"] = {**rep, "depth": depth, "k": k}
        return {
            "plan": asdict(plan),
            "trt_version": self.version,
            "gpu": f"{self.gpu_name} (sm_{self.cc[0]}{self.cc[1]})",
            "graphs": graphs,
        }

    def build(self, onnx_path, plan: BuildPlan, *, force: bool = False, ranges=None) -> dict:
        """Engine for one ONNX file: cached if its key matches, else built. Returns the
        build report (engine path, cached, sparse layers, build seconds, log path)."""
        onnx_path = Path(onnx_path)
        sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
        key = cache_key(
            sha,
            self.version,
            self.gpu_name,
            self.cc,
            plan,
            workspace_mb=self.workspace_mb,
            opt_level=self.opt_level,
        )
        stem = self.cache_dir / f"{onnx_path.stem}-{key}"
        engine, report = stem.with_suffix(".engine"), stem.with_suffix(".json")
        if engine.exists() and report.exists() and not force:
            return {**json.loads(report.read_text()), "cached": True}
        t0 = time.perf_counter()
        with BuildLog(stem.with_suffix(".log"), self.log_severity) as log:
            blob, info = self._build(onnx_path, plan, log, ranges)
        _atomic_write(engine, blob)
        rep = {
            "onnx": str(onnx_path),
            "engine": str(engine),
            "key": key,
            "build_s": round(time.perf_counter() - t0, 2),
            "log": str(log.path),
            "warnings": log.counts["WARNING"],
            "errors": log.counts["ERROR"],
            "inspector": sparse_layers(info),
            "sparse_log": sparse_from_log(log.lines),
        }
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
        shapes = {
            network.get_input(i).name: tuple(network.get_input(i).shape)
            for i in range(network.num_inputs)
        }
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
                raise BackendError(
                    f"TensorRT {self.version} has no BuilderFlag.{name}; "
                    "see rtinfer.inference.backends.tensorrt_plan.build_plan"
                )
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
                trt.LayerInformationFormat.JSON
            )
        except Exception as e:  # TensorRT raises untyped errors across versions
            return json.dumps({"error": f"{type(e).__name__}: {e}"})


def _atomic_write(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None, default_model: str = "models/zoo/conveyor-v1") -> int:
    """`rtinfer build-engine`: build (or find cached) engines for every graph of a model
    (default_model: --model's default; the CLI passes the shipped one's absolute path).
    --dry-run prints the plan only (works without tensorrt; --trt-version overrides)."""
    p = argparse.ArgumentParser(prog="rtinfer build-engine", description=main.__doc__)
    p.add_argument("--model", default=default_model, help="model directory")
    p.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", *QUANTISED],
        default=None,
        help="the engine's precision (overrides --fp16); int8 and fp8 build the "
        "model's Q/DQ graphs (python -m models.qdq MODEL int8)",
    )
    p.add_argument(
        "--compute-capability",
        default=None,
        metavar="MAJOR.MINOR",
        help="dry run: check the plan against this GPU (e.g. 8.7 for Orin)",
    )
    p.add_argument(
        "--sparse",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="BuilderFlag.SPARSE_WEIGHTS (2:4 weights); same default as the backend",
    )
    p.add_argument("--cache-dir", default=None, help="default: <model>/trt_cache")
    p.add_argument("--workspace-mb", type=int, default=1024)
    p.add_argument("--opt-level", type=int, default=3, help="builder optimization level 0-5")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--trt-version", default=None, help="plan for this version (dry run)")
    args = p.parse_args(argv)
    fp16 = args.fp16 if args.precision in (None, *QUANTISED) else args.precision == "fp16"
    quantised = args.precision if args.precision in QUANTISED else None
    try:
        md = ModelDir.load(args.model, check_hashes=False)
        dtypes = {key[0] for key in md.graphs}
        if args.dry_run:
            version = args.trt_version or _installed_trt_version()
            plan = build_plan(
                version, fp16, args.sparse, dtypes, quantised, _capability(args.compute_capability)
            )
            print(
                json.dumps(
                    {
                        "plan": asdict(plan),
                        "graphs": len([k for k in md.graphs if k[0] == plan.onnx_dtype]),
                    },
                    indent=1,
                )
            )
            return 0
        t0 = time.perf_counter()
        builder = EngineBuilder(
            args.cache_dir or md.path / "trt_cache",
            workspace_mb=args.workspace_mb,
            opt_level=args.opt_level,
        )
        report = builder.build_model(
            md, fp16=fp16, sparse=args.sparse, force=args.force, precision=quantised
        )
        report["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(report, indent=1))
        return 0
    except ModelError as e:
        say("build-engine", str(e), error=False)
        return 2


def _capability(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        raise BackendError(f"--compute-capability {text!r}: give MAJOR.MINOR, e.g. 8.7") from None


def _installed_trt_version() -> str:
    try:
        import tensorrt as trt
    except ImportError:
        raise BackendError(
            "tensorrt is not installed; pass --trt-version for a dry run "
            "or install TensorRT (JetPack ships it)"
        ) from None
    return trt.__version__


if __name__ == "__main__":
    sys.exit(main())
