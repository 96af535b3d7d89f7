"""Shared-k graphs: one step graph per depth whose token count is free, so the prefill, the
verify and the decode step of that depth run through one ONNX Runtime session and read one
copy of the weights.

    python -m models.shared_k DIR [--dtypes float32 int8]

Every static (depth, k) graph is its own session on ONNX Runtime, with its own prepacked
weights. A speculative chunk runs the observation prefill (k = 28 on conveyor-v1) and then
its verifies (k = 8): the prefill's weights push the verify's out of the CPU's caches, and
the first verify after each prefill paid for it (on the 2-core host, 1.15 ms against 0.75 ms
for the later ones, `rtinfer bench decode`). One graph per depth with a free `tokens`
dimension makes those passes share their weights. I/O is models.export's, with k free:
  inputs  tokens int64 [1, k], start_pos int64 [1], kv [n_layer, 2, 1, n_head, max_ctx, hd]
  outputs logits float32 [1, k, V], kv_out (as kv)
Each shared graph is checked against every static graph of its depth and set, at every k
the set exports, on ONNX Runtime, and refused unless logits and KV agree within `TOLERANCE`
of the logits' scale and every row's argmax is the same. Not to the bit: ONNX Runtime fuses
a static graph's MatMul and Add into a Gemm (bias inside the product) where the free
dimension keeps them apart, which rounds differently (a few 1e-6 on conveyor-v1's logits).
So a backend runs one form for a whole decode: plain and speculative decoding on the shared
graphs are token-identical to each other, as on the static ones (`rtinfer bench decode`
checks every chunk). Quantised ones are the fp32 shared graph through models.quantise's
settings. Listed under "shared_k" in graphs.json:
{"file", "depth", "dtype", "ks", "sha256"}; the graphs under "graphs" stay byte-identical and
fp32 shared graphs point into weights.bin. fp16 is left out (ORT's CPU provider lacks its
kernels, and TensorRT builds the static graphs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx

from models import checkpoint
from models.export import export_graph
from models.quantise import QUANTISED, quantise_as
from models.share import WEIGHTS, external_tensors, externalise, listed_elsewhere
from rtinfer.model.manifest import read_manifest, write_manifest

KEY = "shared_k"
TOLERANCE = 1e-4  # of max(1, the largest |logit|)


def check_shared(shared_path, static_path, k: int, seed: int = 0) -> tuple[float, bool]:
    """(max |difference| of logits and kv_out over the logits' scale, every row's argmax
    equal) between the shared graph run at k and the static graph of that k, on one random
    KV, tokens and start position."""
    from models.parity import ort_session

    shared, static = ort_session(shared_path), ort_session(static_path)
    kv_in = next(i for i in static.get_inputs() if i.name == "kv")
    shape = [int(d) for d in kv_in.shape]
    rng = np.random.default_rng(seed)
    dtype = np.float16 if "float16" in kv_in.type else np.float32
    vocab = int(static.get_outputs()[0].shape[2])
    feed = {
        "tokens": rng.integers(0, vocab, size=(1, k), dtype=np.int64),
        "start_pos": rng.integers(0, shape[4] - k + 1, size=1).astype(np.int64),
        "kv": (0.5 * rng.standard_normal(shape)).astype(dtype),
    }
    a = shared.run(["logits", "kv_out"], feed)
    b = static.run(["logits", "kv_out"], feed)
    scale = max(1.0, float(np.abs(b[0]).max()))
    diff = max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(a, b))
    return diff / scale, bool((a[0].argmax(-1) == b[0].argmax(-1)).all())


def export_shared_k(model_dir, dtypes=None, *, policy=None) -> dict:
    """Write one shared-k graph per depth with more than one k, for every set in `dtypes`
    (default: fp32 and every quantised set the directory has), and list them in graphs.json
    (replacing earlier ones of those sets; other sets' stay). Each points its weights at the
    bytes its set's static graphs read already (a tensor they do not hold goes to the
    folder's weights.bin).
    policy: the torch model (default the directory's checkpoint). Returns {file: its largest
    relative difference from the static graphs}; raises where one is over TOLERANCE or an
    argmax differs."""
    out = Path(model_dir)
    manifest = read_manifest(out)
    policy = policy or checkpoint.load(out / "policy").model
    have = {g["dtype"] for g in manifest["graphs"]}
    sets = dtypes or [d for d in ("float32", *QUANTISED) if d in have]
    others = listed_elsewhere(out, manifest, KEY, sets)
    entries, report, fp32 = [], {}, {}
    for dtype in sorted(sets, key=lambda d: d != "float32"):  # fp32 first: the others' source
        static: dict[int, dict[int, Path]] = {}
        for g in manifest["graphs"]:
            if g["dtype"] == dtype:
                static.setdefault(int(g["depth"]), {})[int(g["k"])] = out / g["file"]
        if not static:
            raise ValueError(f"{out}: no {dtype} graphs in graphs.json")
        folder = next(iter(next(iter(static.values())).values())).parent
        blob = (
            bytearray((folder / WEIGHTS).read_bytes())
            if (folder / WEIGHTS).exists()
            else bytearray()
        )
        names = [p.name for ks in static.values() for p in ks.values()]
        seen = external_tensors(folder, names, bytes(blob))
        grown = len(blob)
        for depth, by_k in sorted(static.items()):
            if len(by_k) < 2:  # one k: nothing to share
                continue
            path = folder / f"step_d{depth}_shared.onnx"
            if depth not in fp32:
                fp32[depth] = export_graph(  # traced at k = 2, the token count free
                    policy, depth, 2, out / f".step_d{depth}_shared_fp32.onnx", free_k=True
                )
            if dtype == "float32":
                shutil.copyfile(fp32[depth], path)
            else:
                quantise_as(fp32[depth], path, dtype, manifest)
            worst = 0.0
            for k, single in sorted(by_k.items()):
                diff, same = check_shared(path, single, k)
                if diff > TOLERANCE or not same:
                    raise RuntimeError(
                        f"{path.name} at k={k}: differs from {single.name} by {diff:g} of "
                        f"the logits' scale (argmax equal: {same}) on ONNX Runtime; over "
                        f"{TOLERANCE:g}: re-export the directory"
                    )
                worst = max(worst, diff)
            model = onnx.load(str(path))
            externalise(model, blob, seen)
            onnx.save_model(model, str(path))
            name = str(path.relative_to(out))
            report[name] = worst
            entries.append({"file": name, "depth": depth, "dtype": dtype, "ks": sorted(by_k)})
        if len(blob) != grown:  # tensors the static graphs do not read
            (folder / WEIGHTS).write_bytes(bytes(blob))
            rel = str((folder / WEIGHTS).relative_to(out))
            manifest.setdefault("weights", {})[rel] = hashlib.sha256(blob).hexdigest()
    for path in fp32.values():
        path.unlink()
    for e in entries:
        e["sha256"] = hashlib.sha256((out / e["file"]).read_bytes()).hexdigest()
    manifest[KEY] = others + entries
    write_manifest(out, manifest)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument(
        "--dtypes",
        nargs="+",
        default=None,
        help="graph sets (default: float32 and every quantised set the directory has)",
    )
    a = ap.parse_args(argv)
    report = export_shared_k(a.model_dir, a.dtypes)
    print(json.dumps({"graphs": len(report), "max_rel_diff": max(report.values(), default=0.0)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
