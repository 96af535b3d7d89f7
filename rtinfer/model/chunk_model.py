"""A continuous-chunk policy's model directory (docs/policies.md), validated up front.

    graphs.json       {"format": "rtinfer-graphs", "version": 2, "kind": "chunk",
                       "graphs": [{"level": 0, "file": "chunk_l0.onnx", "sha256": "..."}, ...]}
    chunk_l{N}.onnx   one static graph per budget level: the obs_spec inputs -> `actions`
                      float32 [1, horizon, D] in the action spec's units
    action_spec.json  rtinfer.model.action_spec.ActionSpec (names, units, limits, timing)
    obs_spec.json     rtinfer.model.obs_spec.ObsSpec (keys, dtypes, shapes)
    card.json         optional: {"levels": [{"level": 0, "accuracy": 0.98, ...}], "lineage": {..}}

Level 0 is full quality; level N+1 must cost less than level N (a smaller distilled model,
fewer layers). A policy with one graph has one level: a shorter chunk of a one-shot graph
saves no compute, so there is nothing cheaper to switch to. Any missing or inconsistent
file raises ModelError naming the file and the fix; this module reads JSON and hashes only
(the graphs themselves are opened by the inference side, rtinfer.inference.graph_runner).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from rtinfer.model.directory import ModelError, check_is_dir
from rtinfer.model.flow_model import KIND as FLOW
from rtinfer.model.flow_model import FlowModelDir
from rtinfer.model.specs import SpecDir, read_kind_manifest, read_specs

KIND = "chunk"
OUTPUT = "actions"


@dataclass
class ChunkModelDir(SpecDir):
    kind = KIND

    @property
    def levels(self) -> list[dict]:
        return sorted(self.manifest["graphs"], key=lambda g: g["level"])

    def graph_path(self, level: int) -> Path:
        return self.path / self.levels[level]["file"]

    @classmethod
    def load(cls, path, *, check_hashes: bool = True) -> ChunkModelDir:
        path = Path(path)
        manifest = read_kind_manifest(
            path, KIND, "write one as docs/policies.md says, or run `rtinfer package`"
        )
        md = cls(path, manifest, *read_specs(path))
        md._validate(check_hashes)
        return md

    def _validate(self, check_hashes: bool) -> None:
        where = self.path / "graphs.json"
        graphs = self.manifest.get("graphs")
        if not isinstance(graphs, list) or not graphs:
            raise ModelError(f'{where}: "graphs" must list one graph per budget level')
        levels = sorted(g.get("level", -1) if isinstance(g, dict) else -1 for g in graphs)
        if levels != list(range(len(graphs))):
            raise ModelError(
                f"{where}: levels {levels} must be 0, 1, ... {len(graphs) - 1}, "
                f"each once (0 = full quality)"
            )
        for g in graphs:
            f = self.path / str(g.get("file", ""))
            if not g.get("file") or not f.is_file():
                raise ModelError(f"{f} listed in graphs.json is missing; re-package the model")
            digest = g.get("sha256")
            if not isinstance(digest, str):
                raise ModelError(
                    f"{where}: level {g['level']} has no sha256 of {g['file']}; "
                    f"add it (sha256sum) so a corrupt file is caught"
                )
            if check_hashes and hashlib.sha256(f.read_bytes()).hexdigest() != digest:
                raise ModelError(
                    f"{f}: sha256 differs from graphs.json; the file is corrupt "
                    f"or was replaced: re-package the model"
                )
        for name, digest in self.manifest.get("weights", {}).items():  # levels' shared weights
            f = self.path / name
            if not f.is_file():
                raise ModelError(
                    f"{f} (the levels' shared weights) is missing; re-package the model"
                )
            if check_hashes and hashlib.sha256(f.read_bytes()).hexdigest() != digest:
                raise ModelError(
                    f"{f}: sha256 differs from graphs.json; the file is corrupt "
                    f"or was replaced: re-package the model"
                )


def load_model(path, *, check_hashes: bool = True):
    """The model directory at `path`, of any kind: a ChunkModelDir when its graphs.json
    says kind "chunk", a FlowModelDir for kind "flow", else an action-token ModelDir."""
    from rtinfer.model.directory import ModelDir

    path = Path(path)
    check_is_dir(path)
    try:
        kind = json.loads((path / "graphs.json").read_text()).get("kind", "tokens")
    except (OSError, ValueError, AttributeError):
        kind = "tokens"  # ModelDir.load says what is wrong with the manifest
    if kind == KIND:
        return ChunkModelDir.load(path, check_hashes=check_hashes)
    if kind == FLOW:
        return FlowModelDir.load(path, check_hashes=check_hashes)
    return ModelDir.load(path, check_hashes=check_hashes)
