#!/usr/bin/env bash
# One-command GPU check: device info, backend parity tests, decode-step benchmarks (torch
# eager / CUDA graphs / 2:4 sparse, TensorRT when installed), 2:4 Linear microbench.
#
#   scripts/gpu_check.sh OUTDIR        (from a copied repo; no pip install, no network)
#
# Needs python3 with torch (CUDA build). Optional: pytest (tests), onnx + onnxruntime
# (random models + CPU reference), tensorrt (engine build + parity); each missing one
# skips its part with a message. Stage timeouts keep the whole run under ~15 minutes (the
# INT8/FP8 stage at most 6 minutes, about one on a small GPU build).
# Results: OUTDIR/{nvidia-smi.txt,torch.txt,pytest.txt,trt_quantised.txt,trt_int8.json,
# trt_fp8.json,qdq.json,gpu_check.txt,gpu_check.json}.
set -u
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
status=0

echo "== nvidia-smi"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt"
else
    echo "nvidia-smi not found (Jetson: use tegrastats)" | tee "$OUT/nvidia-smi.txt"
fi

echo "== torch / packages"
timeout 60 "$PY" - <<'EOF' 2>&1 | tee "$OUT/torch.txt"
import importlib.util
import torch
print("torch", torch.__version__, "cuda build", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i} {p.name} sm_{p.major}{p.minor} {p.total_memory / 2**30:.1f} GiB")
for mod in ("pytest", "hypothesis", "onnx", "onnxruntime", "tensorrt", "mujoco", "rich"):
    spec = importlib.util.find_spec(mod)
    version = ""
    if spec:
        try:
            version = getattr(importlib.import_module(mod), "__version__", "")
        except Exception as e:  # report, do not stop the check
            version = f"(import failed: {e})"
    print(f"  {mod:12s} {'yes ' + str(version) if spec else 'MISSING (parts needing it are skipped)'}")
EOF

echo "== parity tests (tests/test_backends.py tests/test_gpu.py)"
if "$PY" -c "import pytest" 2>/dev/null; then
    timeout 180 "$PY" -m pytest tests/test_backends.py tests/test_gpu.py -q -rs -p no:cacheprovider \
        2>&1 | tee "$OUT/pytest.txt"
    rc=${PIPESTATUS[0]}
    echo "pytest exit code: $rc" | tee -a "$OUT/pytest.txt"
    [ "$rc" -eq 0 ] || status=1
else
    echo "SKIPPED: pytest is not installed" | tee "$OUT/pytest.txt"
fi

echo "== TensorRT INT8 / FP8 engines of the shipped model (models.qdq + build-engine --precision)"
# Q/DQ sets are written into a copy (the repo's model stays as it is); FP8 only where the
# GPU has it (sm_89+): elsewhere the refusal line is what is recorded.
if "$PY" -c "import tensorrt, onnxruntime" 2>/dev/null; then
    Q="$OUT/qdq-model"
    rm -rf "$Q" && cp -r models/zoo/conveyor-v1 "$Q" && rm -rf "$Q/trt_cache"
    CC=$("$PY" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())" 2>/dev/null)
    echo "compute capability: ${CC:-unknown}" | tee "$OUT/trt_quantised.txt"
    timeout 120 "$PY" -m models.qdq "$Q" int8 fp8 --cycles 16 >"$OUT/qdq.json" 2>>"$OUT/trt_quantised.txt"
    echo "models.qdq exit code: $?" | tee -a "$OUT/trt_quantised.txt"
    for prec in int8 fp8; do
        timeout 120 "$PY" -m rtinfer.inference.backends.tensorrt_build --model "$Q" \
            --precision "$prec" --cache-dir "$OUT/trt_$prec" --opt-level 1 \
            >"$OUT/trt_$prec.json" 2>>"$OUT/trt_quantised.txt"
        rc=$?
        echo "build-engine --precision $prec exit code: $rc (2 = refused: the line above says why)" \
            | tee -a "$OUT/trt_quantised.txt"
        if [ "$prec" = int8 ] && [ "$rc" -ne 0 ]; then status=1; fi
    done
else
    echo "SKIPPED: tensorrt or onnxruntime is not installed" | tee "$OUT/trt_quantised.txt"
fi

echo "== benchmarks (scripts/gpu_check.py)"
timeout 270 "$PY" scripts/gpu_check.py "$OUT" --budget-s 200 2>&1 | tee "$OUT/gpu_check.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "gpu_check.py exit code $rc (124 = timed out; partial JSON kept)"; status=1; }
echo "== done: results in $OUT"
exit $status
