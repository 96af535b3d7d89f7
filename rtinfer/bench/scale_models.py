"""The model-size ladder's policies: the shipped one and random-weight rungs of the same family.

Every rung keeps the shipped policy's vocabulary, sequence layout (3 instruction tokens, 27
observation tokens, 4 waypoints x 4 dims) and max_ctx; only n_layer / n_embd / n_head grow.
Random weights: their step times are real, their acceptance is not (speculative rows of these
rungs are projections). Each rung is exported once into a cache folder outside the repo,
`$XDG_CACHE_HOME/rtinfer/scale/<name>-<key>/` (default ~/.cache), keyed by a hash of what
decides its files (config, graph plan, torch/onnx/onnxruntime versions), with fp32 graphs
from models.export and int8/int4 sets from models.quantise. Only the graphs a chunk needs are
exported: decode (k=1), verify (k=8), the observation prefill (k=28) at full depth, and at
the one early exit a draft (k=1) and an exit-depth prefill (a budget level that cuts prefill).
Every graph also gets its KV-rows twin (models.kv_rows: the cache read in place, only the new
positions' KV out), so the bench times both forms; a cache made before them gets them once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from rtinfer.bench.options import DEFAULT_MODEL

SHIPPED = "1M"
# name -> (n_layer, n_embd, n_head); params with the shipped vocab (519) and max_ctx (64)
RUNGS = {"10M": (8, 320, 5), "30M": (10, 512, 8), "100M": (14, 768, 12), "300M": (24, 1024, 16)}
TINY = {"tiny": (2, 64, 2)}  # --quick: seconds to export
K_VERIFY = 8
EXPORT_VERSION = 1  # bump when what this module writes changes


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rtinfer" / "scale"


def rung_config(name: str, shipped: dict, max_ctx: int | None = None):
    """The PolicyConfig of a random rung: the shipped config with the rung's shape and one
    early exit at two thirds of the depth (the shipped policy's deeper exit: 4 of 6)."""
    from models.config import PolicyConfig

    n_layer, n_embd, n_head = {**RUNGS, **TINY}[name]
    exit_depth = max(1, round(2 * n_layer / 3)) if n_layer > 1 else None
    return PolicyConfig.from_dict(
        {
            **shipped,
            "n_layer": n_layer,
            "n_embd": n_embd,
            "n_head": n_head,
            "max_ctx": max_ctx or shipped["max_ctx"],
            "exits": [exit_depth] if exit_depth else [],
            "layer_dropout": 0.0,
        }
    )


def _key(cfg_dict: dict, prefills: list[int], precisions: tuple[str, ...]) -> str:
    import onnx
    import onnxruntime
    import torch

    ident = {
        "config": cfg_dict,
        "prefills": prefills,
        "k_verify": K_VERIFY,
        "precisions": list(precisions),
        "v": EXPORT_VERSION,
        "versions": [torch.__version__, onnx.__version__, onnxruntime.__version__],
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def model_dir(
    name: str,
    *,
    shipped=DEFAULT_MODEL,
    prefills=None,
    max_ctx=None,
    horizon=None,
    precisions=("int8", "int4"),
    log=print,
    extra=(),
) -> Path:
    """The model directory of rung `name`: the shipped one for "1M", else the cached export
    (made now if missing: seconds for tiny, minutes and ~1.2 GB of disk per graph set for
    300M). prefills: observation-prefill lengths to export (default the shipped layout's 28);
    max_ctx / horizon: a longer context and chunk for the cost sweep. extra: more precision
    sets the caller needs, added to the cached rung once where it lacks them."""
    if name == SHIPPED:
        return Path(shipped)
    src = Path(shipped)
    shipped_cfg = json.loads((src / "graphs.json").read_text())["config"]
    cfg = rung_config(name, shipped_cfg, max_ctx)
    prefills = sorted(set(prefills or [28]))
    key = _key({**cfg.to_dict(), "horizon": horizon}, prefills, tuple(precisions))
    out = cache_root() / f"{name}-{key}"
    if (out / "graphs.json").exists() and (out / ".complete").exists():
        manifest = json.loads((out / "graphs.json").read_text())
        if "kv_rows" not in manifest:
            from models.kv_rows import export_kv_rows  # torch: only to export

            log(f"scale: adding the KV-rows twins to {out} (once)")
            export_kv_rows(out)
        _add_sets(out, manifest, extra, log)
        return out
    log(f"scale: exporting the {name} rung into {out} (once; cached)")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _export(cfg, src, tmp, prefills, precisions, horizon)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    (out / ".complete").write_text("")
    _add_sets(out, json.loads((out / "graphs.json").read_text()), extra, log)
    return out


def _add_sets(out: Path, manifest: dict, extra, log) -> None:
    """Quantise the sets of `extra` a cached rung lacks (precisions beyond the ones its
    cache key names, e.g. w8a8), with their KV-rows twins, once."""
    have = {g["dtype"] for g in manifest["graphs"]}
    missing = [p for p in extra if p not in ("fp32", "fp16") and p not in have]
    if not missing:
        return
    from models.kv_rows import export_kv_rows  # torch: only to export
    from models.quantise import quantise

    log(f"scale: adding the {', '.join(missing)} graphs to {out} (once)")
    quantise(out, tuple(missing), card=False)
    export_kv_rows(out, tuple(missing))


def _export(cfg, src: Path, out: Path, prefills, precisions, horizon) -> None:
    import torch

    from models import checkpoint
    from models.config import Vocab
    from models.export import export_all
    from models.kv_rows import export_kv_rows
    from models.policy import Policy
    from models.quantise import quantise
    from rtinfer.model.action_tokens import TokenizerConfig

    vocab = Vocab.from_dict(json.loads((src / "graphs.json").read_text())["vocab"])
    torch.manual_seed(0)
    model = Policy(cfg).eval()
    exit_prefills = [(e, k) for e in cfg.exits for k in prefills[:1]]
    export_all(
        model,
        cfg,
        out,
        k_verify=K_VERIFY,
        prefix_len=prefills,
        vocab=vocab,
        fp16=False,
        exit_prefills=exit_prefills,
    )
    checkpoint.save(out / "policy", model, vocab)  # the torch eager row's weights
    del model
    shutil.copy(src / "obs_tokens.json", out / "obs_tokens.json")
    tok = TokenizerConfig.load(src / "tokenizer.json")
    if horizon:
        tok = TokenizerConfig(tok.low, tok.high, tok.bins, horizon, tok.names, tok.period_ns)
    tok.save(out / "tokenizer.json")
    if precisions:
        quantise(out, tuple(precisions), card=False)
    export_kv_rows(out)


def params_of(path) -> int:
    """Parameter count of a model directory's policy (from its checkpoint sidecar config)."""
    from math import prod

    from safetensors import safe_open

    with safe_open(str(Path(path) / "policy.safetensors"), "np") as f:
        return int(sum(prod(f.get_slice(k).get_shape()) for k in f.keys()))
