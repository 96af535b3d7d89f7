"""Package a continuous-chunk policy into a model directory (docs/policies.md) from what a
user already has: a torch nn.Module with an example observation, or ONNX files they
exported themselves.

    rtinfer package --onnx policy.onnx [--onnx smaller.onnx ...] --action-spec spec.json --out DIR
    rtinfer package --module my_pkg.policies:make --example-obs obs.npz \
        --action-spec spec.json --out DIR

- From a module (`package_module`): each level's module is called with the observation's
  arrays as keyword arguments (batch-1 tensors, the obs spec's dtypes) and returns the chunk
  [1, horizon, D]; it is exported with torch.onnx.export (static shapes, opset 17, inputs
  named after the observation keys, output `actions`) and ONNX Runtime's result is checked
  against torch's on the example observation and on RANDOM_CHECKS perturbations of it.
- From ONNX files (`package_onnx`): the obs spec is read off the first graph's inputs unless
  one is given; every graph must have the same inputs.
Both write graphs.json (with sha256s), action_spec.json, obs_spec.json and card.json, then
load the directory as the inference node does and run each level once. Any problem raises
PackageError, one line with the fix; the CLI prints it and exits 2.

The directory is built in a temporary folder beside `out` and moved into place only once
every check passed, so a refusal leaves `out` as it was (a good policy already there keeps
its graphs and its graphs.json). Into an existing `out` the package's files are moved one
by one, graphs.json last; level graphs (chunk_l*.onnx) the new package does not have are
removed, any other file stays.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.chunk_model import KIND, OUTPUT, ChunkModelDir
from rtinfer.model.directory import ModelError
from rtinfer.model.manifest import write_manifest
from rtinfer.model.obs_spec import FORMAT as OBS_FORMAT
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.realtime.complaints import say

OPSET = 17
RANDOM_CHECKS = 16
PARITY_ATOL = 1e-4


class PackageError(ValueError):
    """Packaging failed; the message names the input and the fix."""


def obs_spec_of(example_obs: dict[str, np.ndarray]) -> ObsSpec:
    """The obs spec of an example observation: each array's key, dtype and shape."""
    return ObsSpec(
        {
            "format": OBS_FORMAT,
            "version": 1,
            "normalisation": "in the graph",
            "inputs": [
                {"key": k, "dtype": np.asarray(v).dtype.name, "shape": list(np.asarray(v).shape)}
                for k, v in example_obs.items()
            ],
        }
    )


def _graph_obs_spec(path: Path) -> ObsSpec:
    import onnxruntime as ort

    from rtinfer.inference.graph_runner import numpy_dtype

    inputs = []
    for i in _session(path, ort).get_inputs():
        shape = list(i.shape)
        if not shape or shape[0] != 1 or not all(isinstance(n, int) for n in shape):
            raise PackageError(
                f"{path}: input {i.name!r} has shape {shape}; the contract is "
                f"static [1, ...] (batch 1): re-export with fixed shapes"
            )
        inputs.append({"key": i.name, "dtype": numpy_dtype(i.type), "shape": shape[1:]})
    return ObsSpec(
        {"format": OBS_FORMAT, "version": 1, "normalisation": "in the graph", "inputs": inputs}
    )


def _session(path: Path, ort):
    try:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT's own exception types
        raise PackageError(
            f"{path}: ONNX Runtime cannot load it ({str(e)[:160]}); give an "
            f".onnx file exported with static shapes"
        ) from None


@contextmanager
def _staged(out: Path):
    """A temporary folder beside `out` to build the package in: moved into place if the block
    ends without an exception, removed either way (module docstring)."""
    if out.exists() and not out.is_dir():
        raise PackageError(
            f"--out {out} is a file; give a folder (new, or one holding a policy to replace)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        try:
            yield tmp
        except PackageError as e:  # name the folder asked for, not the temporary one
            raise PackageError(str(e).replace(str(tmp), str(out))) from None
        if not out.exists():
            os.rename(tmp, out)
            return
        stale = [f for f in out.glob("chunk_l*.onnx") if not (tmp / f.name).exists()]
        for name in sorted((f.name for f in tmp.iterdir()), key=lambda n: n == "graphs.json"):
            os.replace(tmp / name, out / name)
        for f in stale:
            f.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def package_onnx(
    graphs, out_dir, action: ActionSpec, *, obs: ObsSpec | None = None, card: dict | None = None
) -> dict:
    """Write the model directory `out_dir` from ONNX files (level 0 first: full quality);
    returns its card. A refusal leaves `out_dir` as it was."""
    graphs = [Path(g) for g in graphs]
    if not graphs:
        raise PackageError("no graph given; pass at least one --onnx file (level 0)")
    for g in graphs:
        if not g.is_file():
            raise PackageError(f"{g}: no such file; give the path of an exported .onnx graph")
    obs = obs or _graph_obs_spec(graphs[0])
    with _staged(Path(out_dir)) as tmp:
        return _write(graphs, tmp, action, obs, card)


def _write(
    graphs: list[Path], out: Path, action: ActionSpec, obs: ObsSpec, card: dict | None
) -> dict:
    """The directory's files in `out` (graphs copied unless already there), then its dry run."""
    entries = []
    for level, g in enumerate(graphs):
        name = f"chunk_l{level}.onnx"
        if g.resolve() != (out / name).resolve():
            shutil.copyfile(g, out / name)
        digest = hashlib.sha256((out / name).read_bytes()).hexdigest()
        entries.append(
            {"level": level, "file": name, "sha256": digest, "bytes": (out / name).stat().st_size}
        )
    manifest = {"format": "rtinfer-graphs", "version": 2, "kind": KIND, "graphs": entries}
    write_manifest(out, manifest)
    action.save(out / "action_spec.json")
    (out / "obs_spec.json").write_text(json.dumps(obs.doc, indent=1) + "\n")
    card = {"kind": KIND, "levels": [{"level": e["level"]} for e in entries], **(card or {})}
    (out / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    _dry_run(out)
    return card


def _dry_run(out: Path) -> None:
    """Load `out` as the node does and run each level once on zeros; PackageError names the
    first problem."""
    from rtinfer.inference.graph_runner import dry_run_problems

    try:
        problems = dry_run_problems(ChunkModelDir.load(out))
    except ModelError as e:
        raise PackageError(str(e)) from None
    if problems:
        raise PackageError(problems[0])


def package_module(
    modules,
    example_obs: dict[str, np.ndarray],
    out_dir,
    action: ActionSpec,
    *,
    card: dict | None = None,
    atol: float = PARITY_ATOL,
    seed: int = 0,
) -> dict:
    """Export each level's torch module (level 0 first) and package them; the card records
    each level's parity (max |ONNX Runtime - torch|) and parameter count. A refusal leaves
    `out_dir` as it was."""
    import torch

    if isinstance(modules, torch.nn.Module):
        modules = [modules]
    example = {k: np.asarray(v) for k, v in example_obs.items()}
    obs = obs_spec_of(example)
    with _staged(Path(out_dir)) as out:
        files, levels = [], []
        for level, module in enumerate(modules):
            path = out / f"chunk_l{level}.onnx"
            _export(module, example, path)
            parity = _parity(module, example, path, action, seed)
            if parity > atol:
                raise PackageError(
                    f"level {level}: ONNX Runtime differs from torch by "
                    f"{parity:.2g} (> {atol:g}); the module does something the "
                    f"exporter cannot trace (data-dependent control flow?)"
                )
            files.append(path)
            levels.append(
                {
                    "level": level,
                    "parity_max_abs": parity,
                    "params": int(sum(p.numel() for p in module.parameters())),
                }
            )
        return _write(files, out, action, obs, {**(card or {}), "levels": levels})


def _keywords(module, keys):
    """`module` called with positional graph inputs as the observation's keyword arguments."""
    import torch

    class Keywords(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *xs):
            return self.inner(**dict(zip(keys, xs)))

    return Keywords()


def _export(module, example: dict, path: Path) -> None:
    import warnings

    import torch

    keys = list(example)
    args = tuple(torch.from_numpy(np.ascontiguousarray(v)[None]) for v in example.values())
    module.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
            torch.onnx.export(
                _keywords(module, keys),
                args,
                str(path),
                input_names=keys,
                output_names=[OUTPUT],
                opset_version=OPSET,
                dynamo=False,
            )
    except Exception as e:  # tracing errors come in many types
        raise PackageError(
            f"torch.onnx.export failed ({type(e).__name__}: {str(e)[:200]}); "
            f"the module must take the observation keys {keys} as keyword "
            f"arguments and return the chunk tensor"
        ) from None


def _parity(module, example: dict, path: Path, action: ActionSpec, seed: int) -> float:
    import onnxruntime as ort
    import torch

    sess = _session(path, ort)
    rng = np.random.default_rng(seed)
    worst, shape = 0.0, (1, action.horizon, action.dim)
    for i in range(RANDOM_CHECKS + 1):
        obs = {
            k: (
                v
                if i == 0 or v.dtype.kind != "f"
                else (v + rng.normal(0, 0.05, v.shape)).astype(v.dtype)
            )
            for k, v in example.items()
        }
        feeds = {k: np.ascontiguousarray(v)[None] for k, v in obs.items()}
        with torch.no_grad():
            ref = module(**{k: torch.from_numpy(v) for k, v in feeds.items()})
        ref = ref.detach().cpu().numpy() if hasattr(ref, "detach") else np.asarray(ref)
        got = sess.run([OUTPUT], feeds)[0]
        if got.shape != shape:
            raise PackageError(
                f"the module returns shape {list(got.shape)}; the action spec says "
                f"{list(shape)} (batch 1, horizon, names): return [1, {action.horizon}, "
                f"{action.dim}], one column per name {list(action.names)} in that order "
                f"(reshape a flat output with .view(1, {action.horizon}, {action.dim})), or "
                f"make action_spec.json's horizon and names match the module"
            )
        worst = max(worst, float(np.max(np.abs(got - ref))))
    return worst


def _resolve(target: str):
    """The nn.Module that `--module package.module:attr` names: the attribute itself when it is
    a module instance, else what calling it with no arguments returns."""
    import torch

    mod, _, attr = target.partition(":")
    try:
        obj = getattr(importlib.import_module(mod), attr) if attr else importlib.import_module(mod)
    except (ImportError, AttributeError) as e:
        raise PackageError(
            f"--module {target}: cannot import it ({e}); give "
            f"'package.module:factory', a callable returning the nn.Module, "
            f"importable from here (its folder on PYTHONPATH)"
        ) from None
    if isinstance(obj, torch.nn.Module):
        return obj
    if not callable(obj):
        raise PackageError(
            f"--module {target}: is a {type(obj).__name__}; give a callable "
            f"that returns the nn.Module"
        )
    try:
        made = obj()
    except Exception as e:  # the user's factory: any error is theirs to fix
        raise PackageError(
            f"--module {target}: calling it with no arguments failed "
            f"({type(e).__name__}: {str(e)[:160]}); the factory takes none: "
            f"let it build the module and load its trained weights itself"
        ) from None
    if not isinstance(made, torch.nn.Module):
        raise PackageError(
            f"--module {target}: returned a {type(made).__name__}, not a torch nn.Module"
        )
    return made


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rtinfer package", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--onnx",
        action="append",
        help="an exported graph; repeat for cheaper levels (level 0 first)",
    )
    src.add_argument(
        "--module",
        action="append",
        help="package.module:factory, called with no arguments, returning a torch "
        "nn.Module with its trained weights loaded (the factory loads them, "
        "e.g. torch.load of a path it knows, relative to its own file); the "
        "module must be importable from here (its folder on PYTHONPATH); "
        "repeat for cheaper levels (level 0 first)",
    )
    p.add_argument(
        "--example-obs", help=".npz of one observation (arrays named by key), with --module"
    )
    p.add_argument("--obs-spec", help="obs_spec.json (default: read off the graph / example)")
    p.add_argument("--action-spec", required=True, help="action_spec.json (docs/policies.md)")
    p.add_argument("--card", help="a JSON file merged into card.json (lineage, accuracy)")
    p.add_argument(
        "--out",
        required=True,
        help="the model directory; built in a temporary folder beside it and moved "
        "into place only when every check passed (a refusal leaves it as it was)",
    )
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        try:
            action = ActionSpec.load(a.action_spec)
        except (OSError, ValueError, TypeError) as e:
            raise PackageError(f"--action-spec {a.action_spec}: {e}") from None
        extra = json.loads(Path(a.card).read_text()) if a.card else None
        obs = ObsSpec.load(a.obs_spec) if a.obs_spec else None
        if a.onnx:
            card = package_onnx(a.onnx, a.out, action, obs=obs, card=extra)
        else:
            if not a.example_obs:
                raise PackageError("--module needs --example-obs OBS.npz (one observation)")
            try:
                with np.load(a.example_obs) as z:
                    example = {k: z[k] for k in z.files}
            except (OSError, ValueError) as e:
                raise PackageError(f"--example-obs {a.example_obs}: {e}") from None
            card = package_module(
                [_resolve(m) for m in a.module], example, a.out, action, card=extra
            )
    except (PackageError, ValueError, OSError) as e:
        say("rtinfer package", str(e), error=False)
        return 2
    print(
        json.dumps(
            {
                "out": str(a.out),
                "levels": len(card["levels"]),
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
