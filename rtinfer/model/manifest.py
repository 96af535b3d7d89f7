"""graphs.json, a model directory's manifest: the one reader and the one writer.

Exporters (models.export, export_batched, gating, qdq, quantise, share, chunk_package) edit a
directory's manifest only through `read_manifest` / `write_manifest`; the loaders
(rtinfer.model.directory, chunk_model) check what it says. The writer replaces the file
atomically (a temporary name beside it, then rename), so an interrupted export or a full disk
never leaves a half-written manifest behind a complete-looking directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MANIFEST = "graphs.json"


def manifest_path(model_dir: str | Path) -> Path:
    return Path(model_dir) / MANIFEST


def read_manifest(model_dir: str | Path) -> dict:
    """The parsed graphs.json of `model_dir`. Raises FileNotFoundError or ValueError as json
    does; rtinfer.model.directory turns those into a ModelError naming the fix."""
    return json.loads(manifest_path(model_dir).read_text())


def write_manifest(model_dir: str | Path, manifest: dict) -> Path:
    """Write `manifest` as `model_dir`/graphs.json (indent 1, a final newline), atomically."""
    path = manifest_path(model_dir)
    tmp = path.with_name(f".{MANIFEST}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
