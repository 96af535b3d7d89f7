"""KV-rows twins of a model directory's batch-1 step graphs: the cache is read in place, only
the new positions' KV comes out.

    python -m models.kv_rows DIR [--dtypes float32 int4]

A step graph (models.export) takes the whole static KV and returns all of it (`kv_out`): on
ONNX Runtime that is a Split of the cache into layers, a Where per layer and a Concat of every
layer back out, each step (at 100 M int4, 3 of the k=1 step's 8 ms of kernels). Its twin here
is models.export_batched's rows graph at batch 1, I/O for depth d and k tokens:
  inputs  tokens int64 [1, k], start_pos int64 [1], k{l}, v{l} KV [1, n_head, max_ctx, head_dim]
          for l < d (layer l's cache, read only: the backend binds views of its one cache)
  outputs logits float32 [1, k, V], kv_new KV [d, 2, 1, n_head, k, head_dim]
and the backend writes kv_new into positions [start_pos, start_pos + k) itself (k rows, not
the cache). Each twin is checked against its kv_out graph on ONNX Runtime and refused unless
logits and KV are equal to the bit, so a backend may run either form and give the same tokens.
Quantised twins are the fp32 twin through models.quantise's settings (the same blocks, so the
same packed weights). Listed under "kv_rows" in graphs.json: {"file", "roles", "depth", "k",
"dtype", "sha256"}; the graphs under "graphs" stay byte-identical. fp32 twins share weights.bin.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from models import checkpoint
from models.export_batched import _share_into, check_rows, export_rows_graph
from models.quantise import QUANTISED, quantise_as
from models.share import WEIGHTS, external_tensors, listed_elsewhere
from rtinfer.model.manifest import read_manifest, write_manifest

KEY = "kv_rows"


def export_kv_rows(model_dir, dtypes=None, *, policy=None) -> dict:
    """Write the kv-rows twin of every batch-1 graph of `dtypes` (default: every fp32 and
    quantised set; fp16 is left out, ORT's CPU provider lacks its kernels) and list them in
    graphs.json (replacing earlier twins of those sets; other sets' twins stay). policy: the
    torch model (default the directory's checkpoint). Returns {file: max abs diff against
    its kv_out twin} (all 0.0). Blocks for seconds (demo size) to minutes (100 M: ~400 MB
    per fp32 graph)."""
    out = Path(model_dir)
    manifest = read_manifest(out)
    policy = policy or checkpoint.load(out / "policy").model
    sets = dtypes or ("float32", *QUANTISED)
    wanted = [g for g in manifest["graphs"] if g["dtype"] in sets]
    others = listed_elsewhere(out, manifest, KEY, sets)
    blob = bytearray((out / WEIGHTS).read_bytes()) if (out / WEIGHTS).exists() else bytearray()
    seen = external_tensors(
        out,
        [g["file"] for g in manifest["graphs"] if Path(g["file"]).parent == Path(".")],
        bytes(blob),
    )
    # fp32: (depth, k) -> fp32 twin (or a quantised one's source)
    entries, report, fp32 = [], {}, {}
    for g in sorted(wanted, key=lambda g: g["dtype"] != "float32"):  # fp32 twins first
        depth, k, dtype = int(g["depth"]), int(g["k"]), g["dtype"]
        single = out / g["file"]
        path = single.with_name(single.stem + "_rows.onnx")
        if (depth, k) not in fp32:
            fp32[(depth, k)] = export_rows_graph(
                policy, depth, k, 1, out / f"step_d{depth}_k{k}_rows.onnx"
            )
        if dtype != "float32":
            quantise_as(fp32[(depth, k)], path, dtype, manifest)
        diff = check_rows(path, single, depth, k, 1)
        if diff != 0.0:
            raise RuntimeError(
                f"{path.name}: differs from {single.name} by {diff:g} on ONNX "
                "Runtime; a kv-rows graph must equal its kv_out twin exactly"
            )
        report[str(path.relative_to(out))] = diff
        entries.append(
            {
                "file": str(path.relative_to(out)),
                "roles": g["roles"],
                "depth": depth,
                "k": k,
                "dtype": dtype,
            }
        )
    for path in fp32.values():
        if str(path.relative_to(out)) not in report:  # only a quantised twin's source
            path.unlink()
        elif blob:
            _share_into(path, blob, seen)
    for e in entries:
        e["sha256"] = hashlib.sha256((out / e["file"]).read_bytes()).hexdigest()
    if blob:
        (out / WEIGHTS).write_bytes(bytes(blob))
        manifest.setdefault("weights", {})[WEIGHTS] = hashlib.sha256(blob).hexdigest()
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
        help="graph sets to twin (default: float32 and every quantised set)",
    )
    a = ap.parse_args(argv)
    report = export_kv_rows(a.model_dir, a.dtypes)
    print(json.dumps({"graphs": len(report), "max_abs_diff": max(report.values(), default=0.0)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
