"""ONNX Runtime's transformer fusions, applied offline to a model directory's step graphs.

    python -m models.fuse DIR [--dtypes int4 int8] [--fusions skip_layer_norm gelu]

The fuser is ONNX Runtime's own (onnxruntime.transformers.optimizer, model type gpt2, its
graph rewrites only: opt_level 0, so the file stays portable across hardware). FUSIONS names
what may be fused: `skip_layer_norm` (the residual Add, and a bias Add before it, into the
next LayerNorm: com.microsoft SkipLayerNormalization), `gelu` (the Erf pattern, and its bias
Add, into Gelu / BiasGelu), `attention` (the gpt2 attention patterns: the policy's static-cache
attention does not match them, so it fuses nothing here and is listed to say so). GELU is kept
exact (no tanh approximation), so a fused graph computes what the unfused one does, up to the
kernels' summation order. ONNX Runtime's session optimizer (level all) already fuses the GELU
and the LayerNorms whose Add has one consumer at load; what the offline pass adds is the
SkipLayerNormalization of every residual Add (their sums also feed the next residual).

`fuse_dir` rewrites every graph of the chosen sets in place, kv_out graphs and KV-rows twins
(models.kv_rows) alike, so a backend loads them as before: same I/O, same files. Each fused
graph is run beside its unfused original on ONNX Runtime before it replaces it, and refused
unless their logits differ by less than TOLERANCE of their range and the greedy token agrees
on every row but near-ties (see `compare`). Weights stay where they
were (the folder's shared weights.bin, or inside the graph).
graphs.json gets the new sha256s and "fused": {dtype: {"tool", "fusions", "nodes"}}.
MatMulNBits (int8/int4, with its dequantisation fused into the kernel) comes from
models.quantise; this pass leaves those nodes as they are.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from models.share import WEIGHTS, external_tensors, externalise
from rtinfer.model.manifest import read_manifest, write_manifest

FUSIONS = ("skip_layer_norm", "gelu", "attention")
DEFAULT_FUSIONS = ("skip_layer_norm", "gelu")
TOLERANCE = 1e-2  # of the logits' range: see `compare`
_OPTIONS = {
    "skip_layer_norm": ("enable_skip_layer_norm", "enable_bias_skip_layer_norm"),
    "gelu": ("enable_gelu", "enable_bias_gelu"),
    "attention": ("enable_attention",),
}
_ALWAYS_OFF = (
    "enable_embed_layer_norm",
    "enable_rotary_embeddings",
    "enable_qordered_matmul",
    "enable_gelu_approximation",
    "enable_gemm_fast_gelu",
    "enable_layer_norm",
)


def node_counts(model: onnx.ModelProto) -> dict[str, int]:
    """{op_type: count} of a graph's nodes, Constants included."""
    return dict(collections.Counter(n.op_type for n in model.graph.node).most_common())


def fuse_model(
    model: onnx.ModelProto, n_head: int, n_embd: int, fusions=DEFAULT_FUSIONS
) -> onnx.ModelProto:
    """The graph through ONNX Runtime's transformer optimizer with only `fusions` on."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    unknown = set(fusions) - set(FUSIONS)
    if unknown:
        raise ValueError(f"unknown fusions {sorted(unknown)}; choose from {FUSIONS}")
    opts = FusionOptions("gpt2")
    for name, attrs in _OPTIONS.items():
        for a in attrs:
            setattr(opts, a, name in fusions)
    for a in _ALWAYS_OFF:
        setattr(opts, a, False)
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)  # a line per pattern
    logging.getLogger("fusion").setLevel(logging.ERROR)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the optimizer rewrites the proto it is given
    m = optimizer.optimize_model(
        copy,
        model_type="gpt2",
        num_heads=n_head,
        hidden_size=n_embd,
        optimization_options=opts,
        opt_level=0,
        use_gpu=False,
    )
    return m.model


def _inputs(sess, seed: int = 0) -> dict:
    """Random inputs of a step graph's shapes: tokens in the vocab, start_pos 0, a random KV."""
    rng, out = np.random.default_rng(seed), {}
    vocab = sess.get_outputs()[0].shape[-1]
    for i in sess.get_inputs():
        if i.name == "tokens":
            out[i.name] = rng.integers(0, vocab, i.shape).astype(np.int64)
        elif i.name == "start_pos":
            out[i.name] = np.zeros(i.shape, np.int64)
        else:
            out[i.name] = (0.5 * rng.standard_normal(i.shape)).astype(np.float32)
    return out


def compare(original: Path, fused: Path) -> tuple[float, int]:
    """(max abs difference of the two graphs' logits over the original's range, rows whose
    greedy token differs) on the same random inputs. fp32 graphs agree to ~1e-7 of the range;
    in int8/int4 graphs MatMulNBits rounds its activations to int8 per block, so a last-bit
    change can move an activation by one quantum (~3e-3 of the range on the tiny rung). A
    greedy token may then differ only where the original's top two logits are closer than
    that difference (random weights and inputs give such near-ties); anywhere else the
    rewrite changed the maths, and ValueError is raised."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    a, b = (
        ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
        for p in (original, fused)
    )
    feed = _inputs(a)
    la, lb = a.run(["logits"], feed)[0], b.run(["logits"], feed)[0]
    diff = np.abs(la - lb).max()
    ta, tb = la.argmax(-1), lb.argmax(-1)
    flips = np.argwhere(ta != tb)
    for idx in map(tuple, flips):
        margin = la[idx + (ta[idx],)] - la[idx + (tb[idx],)]
        if margin > 2 * diff:
            raise ValueError(
                f"{fused.name}: a greedy token differs from {original.name}'s by a "
                f"margin of {margin:.3g} (logits differ by {diff:.3g}); not fused"
            )
    return float(diff / max(np.ptp(la), 1e-12)), len(flips)


def _save(model: onnx.ModelProto, path: Path, original: Path) -> None:
    """Write `model` over `original` (atomically), its weights where the original kept them:
    the folder's shared weights.bin (existing tensors by reference, new ones appended) or
    inside the graph."""
    folder = path.parent
    old = onnx.load(str(original), load_external_data=False)
    if any(t.data_location == TensorProto.EXTERNAL for t in old.graph.initializer):
        blob = bytearray((folder / WEIGHTS).read_bytes())
        seen, size = external_tensors(folder, [original.name], bytes(blob)), len(blob)
        externalise(model, blob, seen)
        if len(blob) != size:  # a fusion made a new tensor: it joins the shared file
            _replace(folder / WEIGHTS, bytes(blob))
    _replace(path, model.SerializeToString())


def _replace(path: Path, data: bytes) -> None:
    """Write a new file over `path` (a hard link to it elsewhere keeps the old bytes)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def fuse_dir(model_dir, dtypes=("int8", "int4"), fusions=DEFAULT_FUSIONS) -> dict:
    """Fuse every graph of the `dtypes` sets of a model directory in place (see the module
    doc). A set fused already is left as it is. Returns {dtype: {file: {"nodes_before",
    "nodes_after", "ops_after", "max_rel_diff", "near_tie_flips"}}}. Blocks for seconds (tiny)
    to minutes (100 M: ~60 MB per int4 graph, 400 MB per fp32 one)."""
    out = Path(model_dir)
    manifest = read_manifest(out)
    cfg = manifest["config"]
    done = manifest.setdefault("fused", {})
    report = {}
    for dtype in dtypes:
        dtype = {"fp32": "float32", "fp16": "float16"}.get(dtype, dtype)
        entries = [
            g for key in ("graphs", "kv_rows") for g in manifest.get(key, []) if g["dtype"] == dtype
        ]
        if dtype in done or not entries:
            continue
        import onnxruntime

        rep = {}
        for g in entries:
            path = out / g["file"]
            before = onnx.load(str(path))
            fused = fuse_model(before, int(cfg["n_head"]), int(cfg["n_embd"]), fusions)
            trial = path.with_name(path.stem + ".fused.onnx")
            try:
                _save(fused, trial, path)
                diff, flips = compare(path, trial)
                if diff > TOLERANCE:
                    raise ValueError(
                        f"{path.name}: fused logits differ by {diff:.2g} of their "
                        f"range (> {TOLERANCE}); not fused"
                    )
                ops = node_counts(fused)
                rep[g["file"]] = {
                    "nodes_before": sum(node_counts(before).values()),
                    "nodes_after": sum(ops.values()),
                    "ops_after": ops,
                    "max_rel_diff": diff,
                    "near_tie_flips": flips,
                }
                os.replace(trial, path)
            finally:
                trial.unlink(missing_ok=True)
            g["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        folder = out / Path(entries[0]["file"]).parent / WEIGHTS
        if folder.exists() and str(folder.relative_to(out)) in manifest.get("weights", {}):
            manifest["weights"][str(folder.relative_to(out))] = hashlib.sha256(
                folder.read_bytes()
            ).hexdigest()
        done[dtype] = {
            "tool": f"onnxruntime {onnxruntime.__version__} transformers optimizer "
            "(gpt2, opt_level 0)",
            "fusions": list(fusions),
            "nodes": {f: [r["nodes_before"], r["nodes_after"]] for f, r in rep.items()},
        }
        report[dtype] = rep
    write_manifest(out, manifest)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument(
        "--dtypes",
        nargs="+",
        default=["int8", "int4"],
        help="graph sets to fuse: float32 (fp32), int8, int4",
    )
    ap.add_argument("--fusions", nargs="+", default=list(DEFAULT_FUSIONS), choices=FUSIONS)
    a = ap.parse_args(argv)
    report = fuse_dir(a.model_dir, a.dtypes, a.fusions)
    print(
        json.dumps(
            {
                d: {
                    f: [r["nodes_before"], r["nodes_after"], r["max_rel_diff"]]
                    for f, r in rep.items()
                }
                for d, rep in report.items()
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
