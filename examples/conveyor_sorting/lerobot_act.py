"""LeRobot's ACTPolicy on the conveyor cell's state observations: train, export, evaluate.

Runs in the LeRobot venv (`make lerobot-env`, scripts/lerobot_env.sh); torch and lerobot
are imported inside functions only, so this module imports anywhere.

    python -m examples.conveyor_sorting.lerobot_act train --data A.npz B.npz ... --out DIR \
        [--steps N --chunk 4]
    python -m examples.conveyor_sorting.lerobot_act export --checkpoint DIR --out model.onnx
    python -m examples.conveyor_sorting.lerobot_act eval --onnx model.onnx --episodes 10
    python -m examples.conveyor_sorting.lerobot_act dagger --onnx model.onnx --episodes 12 \
        --out d.npz

Model: lerobot.policies.act.modeling_act.ACTPolicy, state only (no images, use_vae=False),
chunk_size = n_action_steps = H = 4. ACT needs "observation.environment_state" (or images),
so the flat observation vector is split in two inputs, both built inside the graph from
the raw observation keys (see `features`):
  observation.state (15): gantry (8), held one-hot (4: none, class 0..2), and the bin the
      instruction names for the held class, one-hot (3; zeros when nothing is held);
  observation.environment_state (57): per object slot (K=6) class one-hot (3), x, y, valid,
      x - cup x, y - cup y (8 each, zero for an unused slot), then the instruction as a 3x3
      one-hot (instruction[c] == b).
action (4 per step, chunk 4): waypoint (x, y, z, suction); the network predicts x, y, z
relative to the cup's observed position (the graph adds it back) and suction absolute.
Normalisation: mean/std of the training rows (std floored at 1e-3), per input feature and
per (waypoint, dim) of the action; applied to inputs and undone on outputs inside the
exported graph, which also clips to the action limits (tokenizer low/high).

Data: expert .npz files from examples.conveyor_sorting.collect (raw arrays objects, gantry,
held, instruction_tokens, action_values). Token-only files (relabel.npz) have no raw arrays;
`--relabel` regenerates the same counterfactual relabelling (examples.conveyor_sorting.
relabel) from the raw arrays: every carry state again under the other instructions,
labelled by the scripted expert.

ONNX contract (opset 17, static shapes, batch 1): inputs objects f32 [1,K,4], gantry f32
[1,8], held f32 [1,1], instruction i32 [1,3]; output actions f32 [1,4,4] (physical units,
waypoint i due at capture + (i+1) * period).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

NUM_CLASSES = 3
H, D = 4, 4
STATE_DIM = 8 + (NUM_CLASSES + 1) + NUM_CLASSES
SLOT_DIM = NUM_CLASSES + 5
OBS_KEYS = ("objects", "gantry", "held", "instruction")
IMPL = "lerobot.policies.act.modeling_act.ACTPolicy"
DEFAULTS = dict(
    dim_model=128,
    n_heads=4,
    dim_feedforward=512,
    n_encoder_layers=2,
    n_decoder_layers=1,
    dropout=0.05,
    use_vae=False,
)
STD_FLOOR = 1e-3


def visible_k() -> int:
    from examples.conveyor_sorting.config import CellConfig

    return CellConfig().visible_k


def action_limits() -> tuple[np.ndarray, np.ndarray]:
    """The action tokenizer's low/high (models/zoo/conveyor-v1/tokenizer.json = the cell's)."""
    from examples.conveyor_sorting.config import CellConfig, tokenizer_config

    t = tokenizer_config(CellConfig())
    return np.asarray(t.low, np.float32), np.asarray(t.high, np.float32)


# -- data ---------------------------------------------------------------------------------
def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        missing = [
            k
            for k in ("objects", "gantry", "held", "instruction_tokens", "action_values")
            if k not in z.files
        ]
        if missing:
            raise SystemExit(
                f"{path}: no raw arrays {missing} (a token-only file such as "
                f"relabel.npz): pass its source files with --relabel instead"
            )
        return {
            "objects": z["objects"].astype(np.float32),
            "gantry": z["gantry"].astype(np.float32),
            "held": z["held"].astype(np.float32),
            "instruction": z["instruction_tokens"].astype(np.int32),
            "actions": z["action_values"].astype(np.float32),
        }


def relabelled(data: dict[str, np.ndarray], per_state: int = 0, seed: int = 0):
    """Counterfactual relabelling (as examples.conveyor_sorting.relabel, on raw arrays): each
    carry state (held >= 0) under every other instruction (or per_state of them): yields
    (source row, observation, the scripted expert's chunk for that instruction)."""
    from examples.conveyor_sorting.config import CellConfig, tokenizer_config
    from examples.conveyor_sorting.evaluate import all_instructions
    from examples.conveyor_sorting.expert import ScriptedExpert
    from examples.conveyor_sorting.relabel import carry_counterfactuals

    cell = CellConfig()
    expert = ScriptedExpert(cell, tokenizer_config(cell))
    rng = np.random.default_rng(seed)
    for row, _, obs in carry_counterfactuals(
        data, data["instruction"], all_instructions(NUM_CLASSES), per_state, rng
    ):
        expert.reset()
        yield row, obs, expert.act(obs)


def relabel_rows(
    data: dict[str, np.ndarray], per_state: int = 0, seed: int = 0
) -> dict[str, np.ndarray]:
    """The relabelled carry states (`relabelled`) as arrays like load_npz's."""
    out = {k: [] for k in (*OBS_KEYS, "actions")}
    for _, obs, chunk in relabelled(data, per_state, seed):
        for k in OBS_KEYS:
            out[k].append(obs[k])
        out["actions"].append(chunk)
    dt = {"instruction": np.int32}
    return {
        k: np.asarray(v, dtype=dt.get(k, np.float32)).reshape((-1, *data[k].shape[1:]))
        for k, v in out.items()
    }


def load_data(
    paths: list[str],
    relabel: list[str] = (),
    weights: list[float] | None = None,
    per_state: int = 0,
) -> tuple[dict[str, np.ndarray], list[dict]]:
    """All rows of `paths` (+ relabelled carry states of `relabel`); file i repeated
    round(weights[i]) times. Returns (arrays, lineage rows)."""
    parts, lineage = [], []
    for i, p in enumerate(paths):
        d = load_npz(p)
        rep = int(round(weights[i])) if weights else 1
        parts += [d] * rep
        lineage.append({"file": str(p), "rows": len(d["gantry"]), "repeat": rep})
    for p in relabel:
        d = relabel_rows(load_npz(p), per_state=per_state)
        parts.append(d)
        lineage.append(
            {
                "file": str(p),
                "relabelled_rows": len(d["gantry"]),
                "kind": "counterfactual relabel of carry states (scripted expert)",
            }
        )
    data = {k: np.concatenate([d[k] for d in parts]) for k in parts[0]}
    return data, lineage


# -- features (torch, inside the graph) -----------------------------------------------------
def state_features(gantry, held, instruction):
    """(state (B, 15): gantry (8), held one-hot (4), the held class's bin one-hot (3);
    instruction one-hot (B, C, C): [b, c, k] = instruction[b, c] == k) float32 tensors."""
    import torch

    cls = torch.arange(NUM_CLASSES, dtype=torch.float32)
    held_oh = (held == torch.arange(-1, NUM_CLASSES, dtype=torch.float32)).float()  # (B, 4)
    instr_oh = (instruction.unsqueeze(-1).float() == cls).float()  # (B, C, C)
    held_bin = (held_oh[:, 1:].unsqueeze(-1) * instr_oh).sum(1)  # (B, C)
    return torch.cat([gantry, held_oh, held_bin], dim=1), instr_oh


def features(objects, gantry, held, instruction):
    """(state (B, 15), env_state (B, 8K + 9)) float32 tensors from the raw observation."""
    import torch

    B = gantry.shape[0]
    cls = torch.arange(NUM_CLASSES, dtype=torch.float32)
    state, instr_oh = state_features(gantry, held, instruction)
    valid = (objects[..., 3:4] > 0.5).float()  # (B, K, 1)
    obj_oh = (objects[..., 0:1] == cls).float() * valid
    rel = (objects[..., 1:3] - gantry[:, None, 0:2]) * valid
    slots = torch.cat([obj_oh, objects[..., 1:3] * valid, valid, rel], dim=-1)  # (B, K, 8)
    env = torch.cat([slots.reshape(B, -1), instr_oh.reshape(B, -1)], dim=1)
    return state, env


def action_targets(actions, gantry):
    """Physical chunk -> the network's target (xyz relative to the cup, suction absolute)."""
    out = actions.clone()
    out[..., :3] = out[..., :3] - gantry[:, None, :3]
    return out


def make_config(k: int, chunk: int = H, **over):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.utils.constants import ACTION, OBS_ENV_STATE, OBS_STATE

    opts = {**DEFAULTS, **over}
    return ACTConfig(
        input_features={
            OBS_STATE: PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,)),
            OBS_ENV_STATE: PolicyFeature(
                type=FeatureType.ENV, shape=(SLOT_DIM * k + NUM_CLASSES**2,)
            ),
        },
        output_features={ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(D,))},
        chunk_size=chunk,
        n_action_steps=chunk,
        pretrained_backbone_weights=None,
        device="cpu",
        push_to_hub=False,
        **opts,
    )


def _stats(x: np.ndarray) -> dict[str, list]:
    return {"mean": x.mean(0).tolist(), "std": np.maximum(x.std(0), STD_FLOOR).tolist()}


class Exported:
    """Factory for the torch wrapper (built lazily so torch is imported inside functions)."""

    @staticmethod
    def build(policy, stats: dict):
        import torch
        from lerobot.utils.constants import OBS_ENV_STATE, OBS_STATE

        low, high = action_limits()

        class ACTGraph(torch.nn.Module):
            """Raw observation -> features -> normalise -> ACTPolicy.predict_action_chunk ->
            un-normalise -> add the cup position -> clip to the action limits."""

            def __init__(self):
                super().__init__()
                self.policy = policy
                for name in ("state", "env", "action"):
                    self.register_buffer(f"{name}_mean", torch.tensor(stats[name]["mean"]))
                    self.register_buffer(f"{name}_std", torch.tensor(stats[name]["std"]))
                self.register_buffer("low", torch.tensor(low))
                self.register_buffer("high", torch.tensor(high))

            def forward(self, objects, gantry, held, instruction):
                state, env = features(objects, gantry, held, instruction)
                batch = {
                    OBS_STATE: (state - self.state_mean) / self.state_std,
                    OBS_ENV_STATE: (env - self.env_mean) / self.env_std,
                }
                a = self.policy.predict_action_chunk(batch) * self.action_std + self.action_mean
                xyz = a[..., :3] + gantry[:, None, :3]
                a = torch.cat([xyz, a[..., 3:]], dim=-1)
                return torch.maximum(torch.minimum(a, self.high), self.low)

        return ACTGraph().eval()


# -- train --------------------------------------------------------------------------------
def seed_all(seed: int, threads: int) -> None:
    import random

    import torch

    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def fit(
    policy, next_batch, *, steps: int, lr: float, seed: int, log_every: int
) -> tuple[list[dict], float]:
    """`steps` steps of policy.forward(next_batch(generator)) under AdamW (weight decay 1e-4)
    with a one-cycle cosine schedule (5 % warm-up) and gradients clipped at norm 10; prints
    and returns the L1 loss every `log_every` steps, and the wall seconds it took."""
    import torch

    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.05, anneal_strategy="cos"
    )
    gen = torch.Generator().manual_seed(seed)
    t0, hist = time.perf_counter(), []
    for step in range(1, steps + 1):
        loss, info = policy.forward(next_batch(gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps:
            hist.append(
                {
                    "step": step,
                    "l1": round(info["l1_loss"], 5),
                    "s": round(time.perf_counter() - t0, 1),
                }
            )
            print(json.dumps(hist[-1]), flush=True)
    return hist, time.perf_counter() - t0


def save_policy(policy, out: str | Path) -> None:
    from safetensors.torch import save_file

    Path(out).mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in policy.state_dict().items()},
        str(Path(out) / "model.safetensors"),
    )


def add_config_args(parser) -> None:
    """--dim-model ... --use-vae: the ACTConfig fields this package sets (DEFAULTS)."""
    for name, v in DEFAULTS.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=type(v)
            if not isinstance(v, bool)
            else (lambda s: s.lower() in ("1", "true", "yes")),
            default=v,
        )


def train(
    paths: list[str],
    out: str | Path,
    *,
    steps: int = 20000,
    batch: int = 256,
    lr: float = 3e-4,
    chunk: int = H,
    seed: int = 0,
    relabel: list[str] = (),
    weights: list[float] | None = None,
    per_state: int = 0,
    threads: int = 2,
    log_every: int = 500,
    init: str | None = None,
    **cfg_over,
) -> dict:
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.utils.constants import ACTION, OBS_ENV_STATE, OBS_STATE
    from safetensors.torch import load_file

    if chunk != H:
        raise SystemExit(f"--chunk must be {H} (the expert's horizon in the data)")
    seed_all(seed, threads)
    t0 = time.perf_counter()
    data, lineage = load_data(paths, relabel, weights, per_state)
    t_data = time.perf_counter() - t0
    k = data["objects"].shape[1]
    tens = {kk: torch.from_numpy(v) for kk, v in data.items()}
    state, env = features(tens["objects"], tens["gantry"], tens["held"], tens["instruction"])
    target = action_targets(tens["actions"], tens["gantry"])
    stats = {
        "state": _stats(state.numpy()),
        "env": _stats(env.numpy()),
        "action": _stats(target.numpy()),
    }
    sn = {n: (torch.tensor(s["mean"]), torch.tensor(s["std"])) for n, s in stats.items()}
    state = (state - sn["state"][0]) / sn["state"][1]
    env = (env - sn["env"][0]) / sn["env"][1]
    target = (target - sn["action"][0]) / sn["action"][1]
    cfg = make_config(k, chunk, **cfg_over)
    policy = ACTPolicy(cfg)
    if init:
        policy.load_state_dict(load_file(str(Path(init) / "model.safetensors")))
    n_params = sum(p.numel() for p in policy.parameters())
    pad = torch.zeros(batch, chunk, dtype=torch.bool)
    n = len(state)

    def next_batch(gen):
        idx = torch.randint(0, n, (batch,), generator=gen)
        return {
            OBS_STATE: state[idx],
            OBS_ENV_STATE: env[idx],
            ACTION: target[idx],
            "action_is_pad": pad,
        }

    hist, train_s = fit(policy, next_batch, steps=steps, lr=lr, seed=seed, log_every=log_every)
    save_policy(policy, out)
    meta = {
        "implementation": IMPL,
        "visible_k": k,
        "chunk": chunk,
        "command": "python -m examples.conveyor_sorting.lerobot_act " + " ".join(sys.argv[1:])
        if sys.argv[0].endswith("lerobot_act.py")
        else None,
        "per_state": per_state,
        "config": {
            **DEFAULTS,
            **cfg_over,
            "chunk_size": chunk,
            "n_action_steps": chunk,
            "state_dim": STATE_DIM,
            "env_state_dim": SLOT_DIM * k + NUM_CLASSES**2,
            "action_dim": D,
        },
        "params": n_params,
        "data": lineage,
        "rows": n,
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seed": seed,
        "threads": threads,
        "init": init,
        "train_s": round(train_s, 1),
        "data_s": round(t_data, 1),
        "loss": hist,
        "normalisation": {
            "kind": "mean_std",
            "std_floor": STD_FLOOR,
            "action_xyz": "relative to the observed cup position",
        },
        "stats": stats,
    }
    (Path(out) / "act.json").write_text(json.dumps(meta, indent=1))
    return {k2: meta[k2] for k2 in ("params", "rows", "steps", "train_s", "data_s")} | {
        "final_l1": hist[-1]["l1"] if hist else None
    }


def load_checkpoint(ckpt: str | Path):
    """(ACTGraph torch module in eval mode, meta dict)."""
    from lerobot.policies.act.modeling_act import ACTPolicy
    from safetensors.torch import load_file

    ckpt = Path(ckpt)
    meta = json.loads((ckpt / "act.json").read_text())
    over = {k: meta["config"][k] for k in DEFAULTS}
    policy = ACTPolicy(make_config(meta["visible_k"], meta["chunk"], **over))
    policy.load_state_dict(load_file(str(ckpt / "model.safetensors")))
    policy.eval()
    return Exported.build(policy, meta["stats"]), meta


def example_inputs(data: dict[str, np.ndarray], i: int):
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(data[k][i : i + 1])) for k in OBS_KEYS)


# -- export -------------------------------------------------------------------------------
def export(
    ckpt: str | Path,
    out: str | Path,
    *,
    parity_data: list[str] = (),
    parity_rows: int = 200,
    threads: int = 1,
    lineage_extra: dict | None = None,
) -> dict:
    import onnx
    import torch

    graph, meta = load_checkpoint(ckpt)
    k = meta["visible_k"]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dummy = (
        torch.zeros(1, k, 4),
        torch.zeros(1, 8),
        torch.full((1, 1), -1.0),
        torch.tensor([[0, 1, 2]], dtype=torch.int32),
    )
    # dynamo=False: torch 2.14's torch.export-based exporter writes Split with num_outputs
    # (an opset-18 attribute) into an opset-17 graph, which ONNX Runtime rejects; the
    # TorchScript exporter gives a valid opset-17 graph (its TracerWarnings about iterating
    # a tensor in modeling_act.py are harmless at these static shapes).
    with torch.no_grad():
        torch.onnx.export(
            graph,
            dummy,
            str(out),
            input_names=list(OBS_KEYS),
            output_names=["actions"],
            opset_version=17,
            dynamo=False,
            do_constant_folding=True,
        )
    onnx.checker.check_model(onnx.load(str(out)))
    contract = check_contract(out, k)
    result = {"onnx": str(out), "contract": contract}
    if parity_data:
        data, _ = load_data(list(parity_data))
        result["parity"] = parity(graph, out, data, parity_rows)
    result["onnx_run_us"] = time_onnx(out, k, threads=threads)
    write_lineage(out, meta, result, lineage_extra or {})
    return result


def check_contract(path: str | Path, k: int) -> dict:
    """Raise unless the graph's I/O is exactly the contract; returns it."""
    import onnx

    m = onnx.load(str(path))
    T = onnx.TensorProto
    want_in = [
        ("objects", T.FLOAT, [1, k, 4]),
        ("gantry", T.FLOAT, [1, 8]),
        ("held", T.FLOAT, [1, 1]),
        ("instruction", T.INT32, [1, 3]),
    ]
    want_out = [("actions", T.FLOAT, [1, H, D])]

    def sig(vs):
        return [
            (
                v.name,
                v.type.tensor_type.elem_type,
                [
                    d.dim_value if d.HasField("dim_value") else d.dim_param
                    for d in v.type.tensor_type.shape.dim
                ],
            )
            for v in vs
        ]

    got_in = sig([i for i in m.graph.input if i.name not in {x.name for x in m.graph.initializer}])
    got_out = sig(m.graph.output)
    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    if got_in != want_in or got_out != want_out or opset != 17:
        raise ValueError(
            f"ONNX contract mismatch: inputs {got_in} outputs {got_out} "
            f"opset {opset}; want {want_in} {want_out} opset 17"
        )
    np_name = onnx.helper.tensor_dtype_to_np_dtype
    return {
        "inputs": [[n, np_name(t).name, s] for n, t, s in got_in],
        "outputs": [[n, np_name(t).name, s] for n, t, s in got_out],
        "opset": opset,
    }


def _session(path, threads: int = 1):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def parity(graph, path, data: dict[str, np.ndarray], rows: int = 200, seed: int = 0) -> dict:
    """Max |ONNX Runtime - torch| over `rows` dataset rows (drawn with `seed`)."""
    import torch

    sess = _session(path)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(data["gantry"]), min(rows, len(data["gantry"])), replace=False)
    worst = 0.0
    with torch.no_grad():
        for i in idx:
            ins = example_inputs(data, int(i))
            ref = graph(*ins).numpy()
            got = sess.run(["actions"], {k: v.numpy() for k, v in zip(OBS_KEYS, ins)})[0]
            worst = max(worst, float(np.abs(ref - got).max()))
    return {"rows": len(idx), "max_abs_diff": worst}


def time_onnx(path, k: int, n: int = 1000, threads: int = 1) -> dict:
    sess = _session(path, threads)
    feed = {
        "objects": np.zeros((1, k, 4), np.float32),
        "gantry": np.zeros((1, 8), np.float32),
        "held": np.full((1, 1), -1, np.float32),
        "instruction": np.int32([[0, 1, 2]]),
    }
    for _ in range(50):
        sess.run(None, feed)
    ts = []
    for _ in range(n):
        t = time.perf_counter_ns()
        sess.run(None, feed)
        ts.append(time.perf_counter_ns() - t)
    ts = np.asarray(ts) / 1e3
    return {
        "median_us": round(float(np.median(ts)), 1),
        "p99_us": round(float(np.percentile(ts, 99)), 1),
        "runs": n,
        "threads": threads,
    }


def write_lineage(onnx_path: Path, meta: dict, result: dict, extra: dict) -> Path:
    from importlib.metadata import version

    import torch

    recipe = Path(__file__).resolve().parents[2] / "scripts" / "lerobot_env.sh"
    lin = {
        "implementation": IMPL,
        "lerobot": version("lerobot"),
        "torch": torch.__version__,
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime"),
        "config": meta["config"],
        "params": meta["params"],
        "data": meta["data"],
        "training_rows": meta["rows"],
        "data_note": "expert demonstrations from examples.conveyor_sorting.collect (raw "
        "arrays). Token-only relabel files (relabel.npz from clean+dart, "
        "relabel_d1.npz from dagger1/dagger1b) hold no raw arrays, so the same "
        "counterfactual relabelling (examples.conveyor_sorting.relabel's "
        "method) was regenerated from raw source files (the entries with "
        "relabelled_rows; per_state 0 = all five other instructions per carry "
        "state); 'repeat' = times a file is replicated in the training set.",
        "train_command": meta.get("command"),
        "training": {
            k: meta[k] for k in ("steps", "batch", "lr", "seed", "threads", "train_s", "init")
        }
        | {"final_l1": meta["loss"][-1]["l1"] if meta["loss"] else None},
        "normalisation": meta["normalisation"],
        "observation_features": {
            "observation.state": "gantry(8) + held one-hot(4) + bin of held class one-hot(3)",
            "observation.environment_state": "per slot: class one-hot(3), x, y, valid, "
            "x-cup_x, y-cup_y; + instruction 3x3 one-hot",
        },
        "contract": result["contract"],
        "parity": result.get("parity"),
        "onnx_run_us": result["onnx_run_us"],
        "install_recipe": {
            "script": "scripts/lerobot_env.sh (make lerobot-env)",
            "steps": _recipe_lines(recipe),
        },
        **extra,
    }
    p = onnx_path.parent / "lineage.json"
    old = json.loads(p.read_text()) if p.exists() else {}
    if "lockstep" in old and "lockstep" not in lin:
        lin["lockstep_previous"] = old["lockstep"]
    p.write_text(json.dumps(lin, indent=1))
    return p


def _recipe_lines(script: Path) -> list[str]:
    if not script.exists():
        return []
    txt = script.read_text()
    pins = {}
    for name in ("TORCH_PINS", "LEROBOT_DEPS", "CELL_DEPS"):
        i = txt.index(name + "=(")
        pins[name] = " ".join(txt[i + len(name) + 2 : txt.index(")", i)].split())
    lerobot = txt.split("LEROBOT_PIN=")[1].split()[0]
    return [
        "python3 -m venv .venv-lerobot",
        f"pip install {pins['TORCH_PINS']}   # the builds on local disk",
        f"pip install --no-deps {lerobot}",
        f"pip install -c <torch pins> {pins['LEROBOT_DEPS']} {pins['CELL_DEPS']}",
        "pip install --no-deps -e <repo>",
    ]


# -- lockstep evaluation --------------------------------------------------------------------
class OnnxACTPolicy:
    """reset() / act(obs) -> (H, D) float32 chunk, through ONNX Runtime (1 thread)."""

    def __init__(self, path: str | Path, threads: int = 1):
        self.sess = _session(path, threads)

    def reset(self) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        feed = {
            "objects": np.asarray(obs["objects"], np.float32)[None],
            "gantry": np.asarray(obs["gantry"], np.float32)[None],
            "held": np.asarray(obs["held"], np.float32).reshape(1, 1),
            "instruction": np.asarray(obs["instruction"], np.int32).reshape(1, -1),
        }
        return self.sess.run(["actions"], feed)[0][0]


def lockstep(
    onnx_path: str | Path,
    episodes: int = 10,
    seed: int = 0,
    per_episode: int = 20,
    instructions: str = "all",
) -> dict:
    from examples.conveyor_sorting.config import EnvConfig
    from examples.conveyor_sorting.evaluate import parse_instructions, run_per_instruction

    perms = parse_instructions(instructions)
    t = time.perf_counter()
    r = run_per_instruction(
        lambda env: OnnxACTPolicy(onnx_path),
        perms,
        episodes=episodes,
        per_episode=per_episode,
        seed=seed,
        cfg=EnvConfig(),
    )
    r["wall_s"] = round(time.perf_counter() - t, 1)
    r["seed"], r["onnx"] = seed, str(onnx_path)
    return r


def dagger(
    onnx_path: str | Path, out: str | Path, episodes: int, seed: int, beta: float = 0.0
) -> dict:
    """Collector's DAgger: the ONNX ACT drives, the scripted expert labels (all six
    instructions)."""
    from examples.conveyor_sorting.collect import collect
    from examples.conveyor_sorting.evaluate import all_instructions

    return collect(
        episodes,
        out,
        seed=seed,
        make_policy=lambda env: OnnxACTPolicy(onnx_path),
        beta=beta,
        instructions=all_instructions(),
        show_progress=False,
    )


# -- CLI ----------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.lerobot_act", description=__doc__.splitlines()[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", nargs="+", required=True)
    t.add_argument("--weights", nargs="+", type=float, default=None, help="repeat per --data file")
    t.add_argument(
        "--relabel", nargs="*", default=[], help="raw files whose carry states to relabel"
    )
    t.add_argument("--per-state", type=int, default=0)
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=20000)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--lr", type=float, default=3e-4)
    t.add_argument("--chunk", type=int, default=H)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--init", default=None, help="checkpoint dir to start from")
    t.add_argument("--log-every", type=int, default=500)
    add_config_args(t)
    e = sub.add_parser("export")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--parity-data", nargs="*", default=[])
    e.add_argument("--parity-rows", type=int, default=200)
    v = sub.add_parser("eval")
    v.add_argument("--onnx", required=True)
    v.add_argument("--episodes", type=int, default=10)
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--per-episode", type=int, default=20)
    v.add_argument("--instructions", default="all")
    v.add_argument("--lineage", action="store_true", help="record the result in lineage.json")
    g = sub.add_parser("dagger")
    g.add_argument("--onnx", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--episodes", type=int, default=12)
    g.add_argument("--seed", type=int, default=100)
    g.add_argument("--beta", type=float, default=0.0)
    a = ap.parse_args(argv)
    if a.cmd == "train":
        over = {k: getattr(a, k) for k in DEFAULTS}
        r = train(
            a.data,
            a.out,
            steps=a.steps,
            batch=a.batch,
            lr=a.lr,
            chunk=a.chunk,
            seed=a.seed,
            relabel=a.relabel,
            weights=a.weights,
            per_state=a.per_state,
            threads=a.threads,
            init=a.init,
            log_every=a.log_every,
            **over,
        )
    elif a.cmd == "export":
        r = export(a.checkpoint, a.out, parity_data=a.parity_data, parity_rows=a.parity_rows)
    elif a.cmd == "eval":
        r = lockstep(a.onnx, a.episodes, a.seed, a.per_episode, a.instructions)
        if a.lineage:
            p = Path(a.onnx).parent / "lineage.json"
            lin = json.loads(p.read_text()) if p.exists() else {}
            lin["lockstep"] = {
                k: r[k]
                for k in (
                    "success_rate",
                    "min_success_rate",
                    "episodes",
                    "episodes_per_instruction",
                    "seed",
                    "correct",
                    "wrong",
                    "missed",
                    "dropped",
                    "per_instruction",
                    "wall_s",
                )
            }
            lin["lockstep"]["command"] = (
                "python -m examples.conveyor_sorting.lerobot_act eval --onnx "
                f"{a.onnx} --episodes {a.episodes} --seed {a.seed}"
            )
            p.write_text(json.dumps(lin, indent=1))
    else:
        r = dagger(a.onnx, a.out, a.episodes, a.seed, a.beta)
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
