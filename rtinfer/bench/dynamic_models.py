"""Model directories the dynamic-compute bench derives from a shipped one (offline, torch).

- `with_graphs`: the model's fp32 graphs plus more (depth, k) step graphs (role "extra":
  e.g. a k-token graph at an early exit, the cascade drafter's first verify, or a wider
  full-depth verify), in a new folder whose files link to the original's.
- `truncated_draft`: a separate draft model made of the target's first `depth` blocks and
  its shared final norm and LM head (what the early exit computes, as a model of its own):
  the stand-in when no distilled draft model ships.
Both export with models.export and read the model's checkpoint (`<dir>/policy`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

from rtinfer.model.manifest import MANIFEST, read_manifest, write_manifest

SPEC_FILES = ("tokenizer.json", "obs_tokens.json")


def _checkpoint(model_dir: Path):
    from models import checkpoint

    return checkpoint.load(model_dir / "policy")


def with_graphs(model_dir, out_dir, graphs) -> Path:
    """out_dir: model_dir's fp32 graph set plus step_d{depth}_k{k}.onnx for each (depth, k)
    in `graphs` it lacks (role "extra": no decoder picks it by role). Returns out_dir."""
    from models.export import _io, export_graph

    src, out = Path(model_dir).resolve(), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != MANIFEST and not (out / f.name).exists():
            (out / f.name).symlink_to(f)
    manifest = read_manifest(src)
    have = [g for g in manifest["graphs"] if g["dtype"] == "float32"]
    ck = None
    for depth, k in graphs:
        if any(g["depth"] == depth and g["k"] == k for g in have):
            continue
        ck = ck or _checkpoint(src)
        path = export_graph(ck.model.eval(), depth, k, out / f"step_d{depth}_k{k}.onnx")
        have.append(
            {
                "file": path.name,
                "roles": ["extra"],
                "depth": depth,
                "k": k,
                "dtype": "float32",
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                **_io(ck.cfg, k, "float32"),
            }
        )
    manifest["graphs"] = have
    manifest["weights"] = {
        n: d for n, d in manifest.get("weights", {}).items() if Path(n).parent == Path(".")
    }
    write_manifest(out, manifest)
    return out


def truncated_draft(model_dir, out_dir, depth: int, k_verify: int = 8) -> Path:
    """out_dir: a draft model directory of the target's first `depth` blocks (fp32 graphs,
    its prefill at the target's prefix length). Returns out_dir."""
    from models import checkpoint
    from models.export import export_all
    from models.policy import Policy
    from rtinfer.model.directory import ModelDir

    src, out = Path(model_dir), Path(out_dir)
    md, ck = ModelDir.load(src), _checkpoint(src)
    cfg = dataclasses.replace(ck.cfg, n_layer=depth, exits=(), layer_dropout=0.0)
    draft = Policy(cfg)
    keep = {
        n: t
        for n, t in ck.model.state_dict().items()
        if not n.startswith("blocks.") or int(n.split(".")[1]) < depth
    }
    draft.load_state_dict(keep)
    export_all(
        draft.eval(),
        cfg,
        out,
        k_verify=k_verify,
        prefix_len=[md.prefix_len],
        vocab=ck.vocab,
        fp16=False,
    )
    for name in SPEC_FILES:
        shutil.copyfile(src / name, out / name)
    checkpoint.save(out / "policy", draft, ck.vocab, {"truncated_from": str(src), "depth": depth})
    (out / "card.json").write_text(
        json.dumps(
            {
                "name": out.name,
                "params": draft.num_params(),
                "truncated_from": src.name,
                "depth": depth,
            }
        )
    )
    return out
