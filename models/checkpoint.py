"""Policy checkpoints: weights in safetensors, config + vocab + metadata in a JSON sidecar.

Never torch.save / pickle: a checkpoint is data, and loading one runs no code.
Layout: `<stem>.safetensors` next to `<stem>.json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.nn.utils import parametrize

from models.config import PolicyConfig, Vocab
from models.policy import Policy

FORMAT = "rtinfer-policy"
VERSION = 1
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Checkpoint:
    model: Policy
    cfg: PolicyConfig
    vocab: Vocab | None = None
    meta: dict = field(default_factory=dict)  # JSON-able extras: tokenizer config, metrics


def paths(path) -> tuple[Path, Path]:
    """(weights, sidecar) for a path given with or without a suffix."""
    stem = (
        Path(path).with_suffix("") if Path(path).suffix in (".safetensors", ".json") else Path(path)
    )
    return stem.with_suffix(".safetensors"), stem.with_suffix(".json")


def save(path, model: Policy, vocab: Vocab | None = None, meta: dict | None = None) -> Path:
    """Write weights + sidecar; returns the weights path. Raises ValueError if 2:4 masks
    are still attached (call models.sparsity.fold first) or the vocab does not fit."""
    if any(parametrize.is_parametrized(m) for m in model.modules()):
        raise ValueError("model still has sparsity masks attached; call sparsity.fold(model)")
    cfg = model.cfg
    if vocab is not None and vocab.size != cfg.vocab_size:
        raise ValueError(f"vocab.size {vocab.size} != cfg.vocab_size {cfg.vocab_size}")
    weights, sidecar = paths(path)
    weights.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(weights), metadata={"format": FORMAT})
    sidecar.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "config": cfg.to_dict(),
                "vocab": vocab.to_dict() if vocab else None,
                "meta": meta or {},
                "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            },
            indent=1,
        )
    )
    return weights


def untransposed(state: dict, want) -> dict:
    """`state` with each `<name>_T` whose `<name>` the model wants (and `state` lacks) swapped
    back (last two axes): a shipped checkpoint stores a matrix in the layout its ONNX graphs
    read it, so that one file serves both (models.checkpoint_blob)."""
    out = {}
    for k, v in state.items():
        base = k[:-2]
        if k.endswith("_T") and k not in want and base in want:
            if base not in state:
                out[base] = v.transpose(-1, -2).contiguous()
        else:
            out[k] = v
    return out


def load(path, device: str = "cpu") -> Checkpoint:
    """Read a checkpoint written by save(); the model comes back in eval mode.
    Raises ValueError on a foreign/newer sidecar or mismatching tensors."""
    weights, sidecar = paths(path)
    info = json.loads(sidecar.read_text())
    if info.get("format") != FORMAT or info.get("version", 0) > VERSION:
        raise ValueError(f"{sidecar}: not a {FORMAT} v<={VERSION} sidecar")
    cfg = PolicyConfig.from_dict(info["config"])
    vocab = Vocab.from_dict(info["vocab"]) if info.get("vocab") else None
    model = Policy(cfg)
    state = untransposed(load_file(str(weights), device=device), model.state_dict())
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:  # torch reports missing/unexpected keys and shape mismatches
        raise ValueError(f"{weights} does not match its config: {e}") from e
    dtype = DTYPES[info.get("dtype", "float32")]
    return Checkpoint(model.to(device=device, dtype=dtype).eval(), cfg, vocab, info["meta"])


# --- resumable training state ---------------------------------------------------------
# One safetensors file: model and optimizer tensors and the RNG states as tensors, the rest
# (step, scheduler, param groups, log, run identity) as JSON in its metadata. Written to a
# temporary name and renamed, so a kill while writing leaves the previous state whole.
TRAIN_FORMAT = "rtinfer-train-state"


def save_training_state(
    path,
    model: Policy,
    opt: torch.optim.Optimizer,
    sched,
    *,
    step: int,
    generator: torch.Generator,
    log: list,
    run: dict,
    seconds: float = 0.0,
) -> Path:
    """Everything a run needs to continue bit-for-bit from `step` (steps done). `run`:
    JSON-able identity of the run (config, data, hyper-parameters) checked on resume;
    seconds: training time spent so far (all sessions)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    opt_state = opt.state_dict()
    for i, st in opt_state["state"].items():
        for k, v in st.items():
            tensors[f"opt.{i}.{k}"] = (
                v.detach().cpu().contiguous() if torch.is_tensor(v) else torch.tensor(v)
            )
    tensors["rng.generator"] = generator.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    meta = {
        "step": step,
        "param_groups": opt_state["param_groups"],
        "scheduler": sched.state_dict(),
        "log": log,
        "run": run,
        "seconds": seconds,
    }
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": TRAIN_FORMAT, "meta": json.dumps(meta)})
    tmp.replace(path)
    return path


def load_training_state(
    path, model: Policy, opt: torch.optim.Optimizer, sched, *, generator: torch.Generator, run: dict
) -> tuple[int, list, float]:
    """Restore what save_training_state wrote into model, opt, sched, generator and torch's
    global RNG; returns (steps done, log so far, seconds so far). Raises ValueError when the
    state belongs
    to another run (`run` differs) or is not a training state."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        info = f.metadata() or {}
        if info.get("format") != TRAIN_FORMAT:
            raise ValueError(f"{path}: not a {TRAIN_FORMAT} file")
        meta = json.loads(info["meta"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if meta["run"] != run:
        diff = sorted(k for k in set(run) | set(meta["run"]) if run.get(k) != meta["run"].get(k))
        raise ValueError(
            f"{path} was written by a different run (differs in {diff}); "
            "resume with the same arguments or start a new --out"
        )
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    sched.load_state_dict(meta["scheduler"])
    generator.set_state(tensors["rng.generator"])
    torch.set_rng_state(tensors["rng.torch"])
    return meta["step"], meta["log"], meta["seconds"]
