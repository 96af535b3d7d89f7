"""One weights file per model directory: every step graph references shared initializers.

Each exported graph carries its own copy of the weights (a model directory holds ~7 graphs
per precision), so the folder is ~7x the model size. `share_weights` moves every initializer
into `weights.bin` beside the graphs (ONNX external data: location, offset, length), storing
each distinct tensor once, and rewrites the manifest's sha256 entries. ONNX Runtime and
TensorRT's parser both read external data relative to the graph file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
from onnx import TensorProto

from rtinfer.model.manifest import read_manifest, write_manifest

WEIGHTS = "weights.bin"
ALIGN = 64  # bytes: keeps every tensor aligned for mmap'd loads
MIN_BYTES = 1024  # small constants stay inside the graph


def externalise(
    model: onnx.ModelProto, blob: bytearray, seen: dict, location: str = WEIGHTS
) -> None:
    """Point every initializer of MIN_BYTES or more at external data. seen: sha256 of a
    tensor -> (file, offset, length) where it is stored already (in `blob` or in another file
    beside the graph, e.g. from external_tensors); a tensor not seen is appended to `blob`,
    which is written as `location`."""
    for t in model.graph.initializer:
        if not t.HasField("raw_data") or len(t.raw_data) < MIN_BYTES:
            continue
        key = hashlib.sha256(t.raw_data).digest()
        if key not in seen:
            blob.extend(b"\0" * (-len(blob) % ALIGN))
            seen[key] = (location, len(blob), len(t.raw_data))
            blob.extend(t.raw_data)
        where, offset, length = seen[key]
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", where), ("offset", str(offset)), ("length", str(length))):
            entry = t.external_data.add()
            entry.key, entry.value = k, v


def external_tensors(folder: Path, files, blob: bytes) -> dict[bytes, tuple[str, int, int]]:
    """externalise's `seen` for the tensors the graph `files` in folder already read from
    external data: sha256 -> (location, offset, length). A tensor in weights.bin is read from
    `blob` (folder's weights.bin, as it may have grown in memory); one in another file beside
    its graph (the checkpoint a shipped model's graphs point into,
    models.checkpoint_blob) from that file."""
    seen: dict[bytes, tuple[str, int, int]] = {}
    other: dict[Path, bytes] = {}
    for f in files:
        graph = Path(folder) / f
        for t in onnx.load(str(graph), load_external_data=False).graph.initializer:
            if t.data_location != TensorProto.EXTERNAL:
                continue
            e = {x.key: x.value for x in t.external_data}
            loc, off, n = e.get("location", WEIGHTS), int(e.get("offset", 0)), int(e["length"])
            if loc == WEIGHTS:
                data = blob
            else:
                beside = graph.parent / loc
                if beside not in other:
                    other[beside] = beside.read_bytes()
                data = other[beside]
            seen.setdefault(hashlib.sha256(data[off : off + n]).digest(), (loc, off, n))
    return seen


def listed_elsewhere(out: Path, manifest: dict, key: str, sets) -> list[dict]:
    """The entries of graphs.json `key` (an optional list: kv_rows, shared_k) of graph sets
    not in `sets`, kept as they are; the files of those in `sets` are deleted, since they are
    about to be written again or went with their set."""
    for g in manifest.get(key, []):
        if g["dtype"] in sets:
            (Path(out) / g["file"]).unlink(missing_ok=True)
    return [g for g in manifest.get(key, []) if g["dtype"] not in sets]


def share_weights(out_dir) -> dict:
    """Rewrite every graph listed in out_dir/graphs.json to use one weights.bin per folder
    (fp32 graphs share out_dir/weights.bin, fp16 ones out_dir/fp16/weights.bin). Returns
    bytes before and after."""
    out = Path(out_dir)
    manifest = read_manifest(out)
    before = after = 0
    by_folder: dict[Path, list[dict]] = {}
    for g in manifest["graphs"]:
        by_folder.setdefault((out / g["file"]).parent, []).append(g)
    for folder, graphs in by_folder.items():
        blob, seen = bytearray(), {}
        for g in graphs:
            path = out / g["file"]
            before += path.stat().st_size
            model = onnx.load(str(path))
            externalise(model, blob, seen)
            onnx.save_model(model, str(path))
            g["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
            after += path.stat().st_size
        (folder / WEIGHTS).write_bytes(bytes(blob))
        after += len(blob)
        manifest.setdefault("weights", {})[str(folder.relative_to(out) / WEIGHTS)] = hashlib.sha256(
            blob
        ).hexdigest()
    write_manifest(out, manifest)
    return {"bytes_before": before, "bytes_after": after}
