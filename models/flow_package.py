"""Package a flow-matching or diffusion policy into a model directory of kind "flow"
(docs/policies.md, "Flow policies") from ONNX graphs a caller exported.

    from models.flow_package import package_flow
    card = package_flow("out/my-flow", "prefix.onnx", ["step.onnx", "step_1step.onnx"],
                        levels=[(10, 0), (4, 0), (2, 0), (1, 1)],
                        action_spec=spec, obs_spec=None,          # None: read off the prefix
                        integrator="euler",
                        affine={"scale": [...], "offset": [...]},  # physical = x*scale+offset
                        card={"lineage": {...}, "levels": [{"level": 0, "accuracy": 0.98}]})

Arguments:
- prefix_onnx: the observation prefix graph; its inputs are the observation keys (the obs
  spec's), its outputs any named static-shape tensors.
- step_onnx_list: the step graph(s), graph 0 first (the trained one; later ones e.g. a
  distilled 1-step graph). Inputs: prefix outputs by the same name/shape/dtype, "x_t"
  float32 [1, H_m, D_m], "t" float32 [1] or [1, H_m] (ddim: float32 or int64 [1]); output
  "v" float32 [1, H_m, D_m].
- levels: one entry per budget level, level 0 (full quality) first, step counts strictly
  falling: (steps, graph) tuples or {"steps": K, "graph": g} dicts (graph defaults to 0).
- action_spec: an ActionSpec or its dict; obs_spec: an ObsSpec, its dict, or None to read
  it off the prefix graph's inputs.
- integrator: "euler" (flow matching, t from 1 = noise to 0 = data) or "ddim" (then ddim=
  {"alphas_cumprod": [...], "prediction": "epsilon" | "sample" | "v_prediction",
  "clip_sample": 1.0 or None, "set_alpha_to_one": True, "steps_offset": 0}).
- affine: {"scale", "offset"} each [D_m] or [H_m, D_m], or None (identity).
- noise: "gaussian" (seeded per cycle) or "zero"; zero_noise_ok: the policy may run
  without noise (a serving option).
- card: merged into card.json ({"kind": "flow", "levels": [{"level", "steps", "graph"}]}
  is written, the caller's keys win; give "levels" with "accuracy" to fill the ladder).

Files written: prefix.onnx, step.onnx (graph 0), step_1.onnx ... (graph i), graphs.json
(through rtinfer.model.manifest.write_manifest, with sha256s), action_spec.json,
obs_spec.json, card.json. ONNX files with external data are not supported (export them
with the weights inside). The directory is built beside `out_dir` and moved into place only
once it loads as the node loads it and every level ran once on an all-zero observation
with finite output; a refusal raises PackageError (one line, the fix) and leaves `out_dir`
as it was. Returns the card written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from models.chunk_package import PackageError, _graph_obs_spec, _staged
from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.directory import ModelError
from rtinfer.model.flow_model import KIND, FlowModelDir
from rtinfer.model.manifest import write_manifest
from rtinfer.model.obs_spec import ObsSpec


def package_flow(
    out_dir,
    prefix_onnx,
    step_onnx_list,
    levels,
    action_spec,
    obs_spec=None,
    *,
    integrator: str = "euler",
    affine: dict | None = None,
    ddim: dict | None = None,
    noise: str = "gaussian",
    zero_noise_ok: bool = False,
    card: dict | None = None,
) -> dict:
    """Write the flow model directory `out_dir` (module docstring); returns its card."""
    prefix = Path(prefix_onnx)
    steps = [
        Path(s)
        for s in ([step_onnx_list] if isinstance(step_onnx_list, (str, Path)) else step_onnx_list)
    ]
    for g in [prefix, *steps]:
        if not g.is_file():
            raise PackageError(f"{g}: no such file; give the path of an exported .onnx graph")
    if not steps:
        raise PackageError("no step graph given; pass at least one (graph 0, the trained one)")
    action = (
        action_spec
        if isinstance(action_spec, ActionSpec)
        else ActionSpec.from_dict(dict(action_spec))
    )
    obs = (
        obs_spec
        if isinstance(obs_spec, ObsSpec)
        else ObsSpec(obs_spec)
        if obs_spec is not None
        else _graph_obs_spec(prefix)
    )
    ladder = [_level(i, lv) for i, lv in enumerate(levels)]
    with _staged(Path(out_dir)) as tmp:
        manifest = {
            "format": "rtinfer-graphs",
            "version": 2,
            "kind": KIND,
            "integrator": integrator,
            "prefix": _copy(prefix, tmp, "prefix.onnx"),
            "steps": [
                _copy(s, tmp, "step.onnx" if i == 0 else f"step_{i}.onnx")
                for i, s in enumerate(steps)
            ],
            "levels": ladder,
            "noise": noise,
            "zero_noise_ok": bool(zero_noise_ok),
        }
        if affine is not None:
            manifest["action_affine"] = {k: _plain(affine[k]) for k in ("scale", "offset")}
        if ddim is not None:
            manifest["ddim"] = {k: _plain(v) for k, v in ddim.items()}
        write_manifest(tmp, manifest)
        action.save(tmp / "action_spec.json")
        (tmp / "obs_spec.json").write_text(json.dumps(obs.doc, indent=1) + "\n")
        card = {"kind": KIND, "levels": ladder, **(card or {})}
        (tmp / "card.json").write_text(json.dumps(card, indent=1) + "\n")
        _dry_run(tmp)
        return card


def _level(i: int, lv) -> dict:
    if isinstance(lv, dict):
        return {"level": i, "steps": lv.get("steps"), "graph": lv.get("graph", 0)}
    if isinstance(lv, int):
        return {"level": i, "steps": lv, "graph": 0}
    steps, graph = lv
    return {"level": i, "steps": steps, "graph": graph}


def _copy(src: Path, out: Path, name: str) -> dict:
    shutil.copyfile(src, out / name)
    data = (out / name).read_bytes()
    return {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _plain(v):
    """JSON-ready: numpy arrays and scalars as lists and floats."""
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _dry_run(out: Path) -> None:
    """Load `out` as the node does and run each level once on zeros; PackageError names the
    first problem."""
    from rtinfer.inference.flow_runner import dry_run_problems

    try:
        problems = dry_run_problems(FlowModelDir.load(out))
    except ModelError as e:
        raise PackageError(str(e)) from None
    if problems:
        raise PackageError(problems[0])
