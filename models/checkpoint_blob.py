"""One weights file per model directory: the checkpoint is the step graphs' external data.

An exported directory holds its fp32 weights twice: `weights.bin` (the graphs' ONNX external
data, read by ONNX Runtime and TensorRT's parser) and `policy.safetensors` (the checkpoint
the torch backend and the exporters read). Every tensor of weights.bin is a checkpoint tensor,
as it is or with its last two axes swapped (the exporter's `<name>_T` for a matrix it stores
transposed). `merge` writes the checkpoint once, each tensor in the layout the graphs read it
(`<name>`, or only `<name>_T` when nothing reads it the other way round), points every graph's
external data into the safetensors data section (location `policy.safetensors`, offset,
length), updates graphs.json's sha256s and drops weights.bin. models.checkpoint.load and
models.moe.load swap a `<name>_T` back, so the torch side reads the same file.

    python -m models.checkpoint_blob models/zoo/conveyor-v1 [--stem moe]
    python -m models.checkpoint_blob --share models/zoo/conveyor-v1-large \
        models/zoo/conveyor-v1-large-gated

ONNX Runtime reads external data only from the graph's own folder (no `..`, no symbolic
links), so a blob shared between model folders lives with the graphs that read it in
models/zoo/_blobs/<sha256>/ (models/zoo/README.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto
from safetensors import safe_open
from safetensors.numpy import save_file

from models.share import WEIGHTS
from rtinfer.model.manifest import read_manifest, write_manifest
from rtinfer.realtime.complaints import say

BLOBS = "_blobs"  # <zoo>/_blobs/<sha256>/: a blob shared by model folders, with its graphs
T = "_T"  # a tensor stored with its last two axes swapped: the graphs' layout


def _swap(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(a, -1, -2))


def _extent(t: TensorProto) -> tuple[str, int, int]:
    e = {x.key: x.value for x in t.external_data}
    return e.get("location", ""), int(e.get("offset", 0)), int(e["length"])


def data_offsets(path: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """(start of the data section, name -> (begin, end) inside it) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return 8 + n, {k: tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def merge(model_dir, stem: str = "policy") -> dict:
    """Make `<stem>.safetensors` the only fp32 weights file of `model_dir` (see the module
    docstring). Returns bytes before and after. Raises ValueError, naming the graph and
    tensor, if a graph reads a tensor the checkpoint does not hold (nothing is changed)."""
    d = Path(model_dir)
    ck, wb = d / f"{stem}.safetensors", d / WEIGHTS
    blob = wb.read_bytes()
    with safe_open(str(ck), "np") as f:
        meta, state = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    layout: dict[bytes, str] = {}
    for k, a in state.items():
        layout.setdefault(hashlib.sha256(a.tobytes()).digest(), k)
        if a.ndim >= 2:
            layout.setdefault(hashlib.sha256(_swap(a).tobytes()).digest(), k + T)
    graphs, name_of = {}, {}
    for g in sorted(d.glob("*.onnx")):
        m = onnx.load(str(g), load_external_data=False)
        for t in m.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL or _extent(t)[0] != WEIGHTS:
                continue
            _, off, n = _extent(t)
            name = layout.get(hashlib.sha256(blob[off : off + n]).digest())
            if name is None:
                raise ValueError(
                    f"{g}: initializer {t.name} is no tensor of {ck.name} (nor one "
                    f"transposed); keep {WEIGHTS}"
                )
            name_of[(off, n)] = name
            graphs[g] = m
    used = set(name_of.values())
    out = {}
    for k, a in state.items():
        if k + T in used:
            out[k + T] = _swap(a)
        if k in used or k + T not in used:
            out[k] = a
    before = len(blob) + ck.stat().st_size
    tmp = ck.with_name(f".{ck.name}.tmp")
    save_file(out, str(tmp), metadata=meta)
    os.chmod(tmp, 0o644)  # save_file's temporary-file mode is the owner's only
    base, spans = data_offsets(tmp)
    changed = set()
    for g, m in graphs.items():
        for t in m.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL or _extent(t)[0] != WEIGHTS:
                continue
            _, off, n = _extent(t)
            begin, end = spans[name_of[(off, n)]]
            assert end - begin == n, (g, t.name)
            del t.external_data[:]
            for key, v in (
                ("location", ck.name),
                ("offset", str(base + begin)),
                ("length", str(n)),
            ):
                e = t.external_data.add()
                e.key, e.value = key, v
        onnx.save_model(m, str(g))
        changed.add(g.name)
    os.replace(tmp, ck)
    wb.unlink()
    manifest = read_manifest(d)
    _rehash(manifest, d, changed)
    weights = manifest.setdefault("weights", {})
    weights.pop(WEIGHTS, None)
    weights[ck.name] = _sha(ck)
    write_manifest(d, manifest)
    return {"bytes_before": before, "bytes_after": ck.stat().st_size}


def _rehash(node, d: Path, changed: set) -> None:
    """Every {"file", "sha256"} entry of graphs.json naming a rewritten graph gets its new hash."""
    if isinstance(node, dict):
        if node.get("file") in changed and "sha256" in node:
            node["sha256"] = _sha(d / node["file"])
        for v in node.values():
            _rehash(v, d, changed)
    elif isinstance(node, list):
        for v in node:
            _rehash(v, d, changed)


def share(folders, stem: str = "policy") -> Path:
    """Keep one copy of the checkpoint blob that `folders` (zoo model folders, each already
    merged) hold byte for byte: move it, and every graph that reads it with the other files
    those graphs read (gated.bin), into <zoo>/_blobs/<sha256 of the blob>/, and name them
    `../_blobs/<sha256>/FILE` in each graphs.json (rtinfer.model.directory follows such paths
    and checks their sha256s as before). Each folder keeps `<stem>.safetensors` as a link to
    the shared file, for the torch side's fixed checkpoint path. Returns the shared folder."""
    folders = [Path(f) for f in folders]
    name = f"{stem}.safetensors"
    digests = {_sha(f / name) for f in folders}
    if len(digests) != 1:
        raise ValueError(
            f"{name} differs between {', '.join(map(str, folders))}; only a "
            "byte-identical blob is shared"
        )
    sha = digests.pop()
    shared = folders[0].parent / BLOBS / sha
    shared.mkdir(parents=True, exist_ok=True)
    rel = f"../{BLOBS}/{sha}/"
    for f in folders:
        moved = {name}
        for g in sorted(f.glob("*.onnx")):
            inits = onnx.load(str(g), load_external_data=False).graph.initializer
            locs = {_extent(t)[0] for t in inits if t.data_location == TensorProto.EXTERNAL}
            if name in locs:
                moved |= {g.name, *locs}
        for n in sorted(moved):
            src, dst = f / n, shared / n
            if dst.exists() and _sha(dst) != _sha(src):
                raise ValueError(f"{dst} exists with other bytes than {src}; rename one")
            os.replace(src, dst) if not dst.exists() else src.unlink()
        (f / name).symlink_to(rel + name)
        manifest = read_manifest(f)
        _prefix(manifest, moved, rel)
        manifest["weights"] = {
            (rel + k if k in moved else k): v for k, v in manifest.get("weights", {}).items()
        }
        write_manifest(f, manifest)
    return shared


def _prefix(node, moved: set, rel: str) -> None:
    """Every {"file": F} entry of graphs.json with F in `moved` becomes {"file": rel + F}."""
    if isinstance(node, dict):
        if node.get("file") in moved:
            node["file"] = rel + node["file"]
        for v in node.values():
            _prefix(v, moved, rel)
    elif isinstance(node, list):
        for v in node:
            _prefix(v, moved, rel)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m models.checkpoint_blob", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "model_dir",
        nargs="+",
        help="one folder to merge; with --share, the folders whose identical blob to share",
    )
    ap.add_argument("--stem", default="policy", help="the checkpoint's stem (moe: moe)")
    ap.add_argument("--share", action="store_true", help="share the folders' identical blob")
    a = ap.parse_args(argv)
    try:
        if a.share:
            print(share(a.model_dir, a.stem))
        else:
            print(json.dumps([merge(m, a.stem) for m in a.model_dir]))
    except (ValueError, FileNotFoundError) as e:
        say(None, f"error: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
