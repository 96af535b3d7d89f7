"""conveyor-flow: a flow-matching policy (models/flow_train.py) on the conveyor cell's state.

    python -m examples.conveyor_sorting.flow_policy COMMAND ...   (COMMAND and its options:)
      collect --episodes 40 --seed 500 --out clean.npz [--noise-m 0.015]
      train --data A.npz B.npz --relabel A.npz --out run.pt --steps 6000
      distill --checkpoint run.pt --data A.npz --out run1.pt --steps 1500
      eval --checkpoint run.pt --steps 10 --episodes 2      (or --dir DIR --level 2)
      dagger --checkpoint run.pt --episodes 12 --seed 700 --out d1.npz
      package --checkpoint run.pt --distilled run1.pt --out DIR --steps 10 4 1
        [--card figures.json]
      latency --dir DIR --data rows.npz

Observation: the raw keys objects, gantry, held, instruction, made into the same features as
conveyor-act (examples/conveyor_sorting/lerobot_act.py `features`: state 15 + environment
57), normalised by the training rows' mean/std (floored at 1e-3) inside the prefix graph.
Action: H = 16 waypoints (800 ms at the cell's 50 ms period) of (x, y, z, suction); the
data is the scripted expert planning 16 waypoints ahead (collect with horizon 16).
Coordinates: y = (a - offset) / scale per (waypoint, dim), offset and scale the mean and
std of (a - cup) over the training rows (cup = (gantry x, y, z, 0)); the prefix graph
outputs the anchor cup / scale, so the flow is learnt relative to the cup (flow_train.py's
anchored coordinates) and the node's affine is a constant.

Graphs (opset 17, batch 1): prefix.onnx (objects, gantry, held, instruction) -> obs_emb
[1, P, E], anchor [1, H, D]; the step graph and the distilled one-step graph (obs_emb, anchor,
x_t [1, H, D], t [1, H]) -> v [1, H, D], written by models.flow_package as step.onnx and
step_1.onnx. The packaged ladder is --steps 10 4 1 (the 1-step level on the distilled graph).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

H, D = 16, 4
OBS_KEYS = ("objects", "gantry", "held", "instruction")
STD_FLOOR = 1e-3
MAX_COMMITTED = 8


def env_config(**over):
    from .config import EnvConfig

    return replace(EnvConfig(), horizon=H, **over)


# -- data -----------------------------------------------------------------------------------
def collect(
    episodes: int, out: str, seed: int, noise_m: float = 0.0, make_policy=None, beta: float = 0.0
) -> dict:
    """The expert's demonstrations (or DAgger with make_policy) with 16-waypoint labels,
    cycling through the six instructions."""
    from .collect import collect as run
    from .evaluate import all_instructions

    return run(
        episodes,
        out,
        seed=seed,
        cfg=env_config(),
        show_progress=False,
        noise_m=noise_m,
        noise_prob=0.5,
        make_policy=make_policy,
        beta=beta,
        instructions=all_instructions(),
    )


def relabel_rows(data: dict[str, np.ndarray], per_state: int, seed: int = 0) -> dict:
    """Counterfactual relabelling of carry states (examples.conveyor_sorting.relabel) with
    the 16-waypoint expert: each carry state under `per_state` other instructions."""
    from .config import CellConfig, tokenizer_config
    from .evaluate import all_instructions
    from .expert import ScriptedExpert
    from .relabel import carry_counterfactuals

    cell = CellConfig()
    expert = ScriptedExpert(cell, tokenizer_config(cell, horizon=H))
    rng = np.random.default_rng(seed)
    out = {k: [] for k in (*OBS_KEYS, "actions")}
    for _, _, obs in carry_counterfactuals(
        data, data["instruction"], all_instructions(), per_state, rng
    ):
        expert.reset()
        for k in OBS_KEYS:
            out[k].append(obs[k])
        out["actions"].append(expert.act(obs))
    dt = {"instruction": np.int32}
    return {
        k: np.asarray(v, dtype=dt.get(k, np.float32)).reshape((-1, *data[k].shape[1:]))
        for k, v in out.items()
    }


def load_data(paths, relabel=(), weights=None, per_state: int = 2):
    from .lerobot_act import load_npz

    parts, lineage = [], []
    for i, p in enumerate(paths):
        d = load_npz(p)
        if d["actions"].shape[1] != H:
            raise SystemExit(
                f"{p}: chunks of {d['actions'].shape[1]} waypoints; collect with "
                f"`flow_policy collect` ({H} waypoints)"
            )
        rep = int(round(weights[i])) if weights else 1
        parts += [d] * rep
        lineage.append({"file": str(p), "rows": len(d["gantry"]), "repeat": rep})
    for p in relabel:
        cache = Path(p).with_suffix(f".relabel{per_state}.npz")  # beside the data, not in git
        if cache.exists():
            with np.load(cache) as z:
                d = {k: z[k] for k in z.files}
        else:
            d = relabel_rows(load_npz(p), per_state)
            np.savez(cache, **d)
        parts.append(d)
        lineage.append(
            {"file": str(p), "relabelled_rows": len(d["gantry"]), "per_state": per_state}
        )
    return {k: np.concatenate([d[k] for d in parts]) for k in parts[0]}, lineage


# -- features ---------------------------------------------------------------------------------
def cond_features(objects, gantry, held, instruction):
    """(B, 72) raw features: conveyor-act's state (15) and environment state (57)."""
    import torch

    from .lerobot_act import features

    state, env = features(objects, gantry, held, instruction)
    return torch.cat([state, env], dim=1)


def cup(gantry):
    """(B, 1, D): the anchor in physical units, (x, y, z, 0) of the cup."""
    import torch

    g = gantry[:, None, :3]
    return torch.cat([g, torch.zeros_like(g[..., :1])], dim=-1)


def stats_of(data) -> dict:
    import torch

    t = {k: torch.from_numpy(data[k]) for k in (*OBS_KEYS, "actions")}
    c = cond_features(t["objects"], t["gantry"], t["held"], t["instruction"]).numpy()
    r = (t["actions"] - cup(t["gantry"])).numpy()
    return {
        "cond_mean": c.mean(0).tolist(),
        "cond_std": np.maximum(c.std(0), STD_FLOOR).tolist(),
        "act_offset": r.mean(0).tolist(),
        "act_scale": np.maximum(r.std(0), STD_FLOOR).tolist(),
    }


def training_tensors(data, stats):
    """(cond (N, 72) normalised, y_rel (N, H, D)) for flow_train."""
    import torch

    t = {k: torch.from_numpy(data[k]) for k in (*OBS_KEYS, "actions")}
    c = cond_features(t["objects"], t["gantry"], t["held"], t["instruction"])
    c = (c - torch.tensor(stats["cond_mean"])) / torch.tensor(stats["cond_std"])
    r = t["actions"] - cup(t["gantry"])
    y = (r - torch.tensor(stats["act_offset"])) / torch.tensor(stats["act_scale"])
    return c.contiguous(), y.contiguous()


def prefix_module(net, stats):
    """The prefix graph: raw observation -> (obs_emb, anchor)."""
    import torch

    class Prefix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net
            self.register_buffer("mean", torch.tensor(stats["cond_mean"]))
            self.register_buffer("std", torch.tensor(stats["cond_std"]))
            self.register_buffer("scale", torch.tensor(stats["act_scale"]))

        def forward(self, objects, gantry, held, instruction):
            c = (cond_features(objects, gantry, held, instruction) - self.mean) / self.std
            return self.net.encode(c), cup(gantry) / self.scale

    return Prefix().eval()


# -- policies in lockstep --------------------------------------------------------------------
def _feed(obs) -> dict:
    return {
        "objects": np.asarray(obs["objects"], np.float32)[None],
        "gantry": np.asarray(obs["gantry"], np.float32)[None],
        "held": np.asarray(obs["held"], np.float32).reshape(1, 1),
        "instruction": np.asarray(obs["instruction"], np.int32).reshape(1, -1),
    }


def limits():
    from .lerobot_act import action_limits

    return action_limits()


class TorchFlowPolicy:
    """reset() / act(obs) -> (H, D): K Euler steps of a checkpoint in torch (noise seeded
    per episode), for evaluation and DAgger while training."""

    def __init__(self, net, stats, steps: int, seed: int = 0, noise: float = 1.0):
        import torch

        self.pre, self.net, self.steps, self.seed = prefix_module(net, stats), net, steps, seed
        self.noise = noise
        self.scale = torch.tensor(stats["act_scale"])
        self.offset = torch.tensor(stats["act_offset"])
        self.low, self.high = (torch.from_numpy(v) for v in limits())
        self.episode = -1

    def reset(self) -> None:
        import torch

        self.episode += 1
        self.gen = torch.Generator().manual_seed(self.seed * 7919 + self.episode)

    def act(self, obs) -> np.ndarray:
        import torch

        from models.flow_train import integrate

        ins = [torch.from_numpy(v) for v in _feed(obs).values()]
        with torch.no_grad():
            emb, anchor = self.pre(*ins)
            noise = torch.randn(1, H, D, generator=self.gen) * self.noise
            y = integrate(self.net, emb, anchor, noise, self.steps)
            a = y * self.scale + self.offset
        return torch.maximum(torch.minimum(a[0], self.high), self.low).numpy()


def dir_policy(path, level: int = 0, seed: int = 0, made: list | None = None):
    """A run_policy factory for a packaged directory: policy_adapter.FlowModelPolicy (the
    node's FlowRunner, noise seeded per cycle); each policy made is appended to `made`."""
    from rtinfer.model.flow_model import FlowModelDir

    from .policy_adapter import FlowModelPolicy

    model = FlowModelDir.load(path)

    def make(env):
        p = FlowModelPolicy(model, env, level=level, seed=seed)
        if made is not None:
            made.append(p)
        return p

    return make


def lockstep(make_policy, episodes: int, seed: int = 0, instructions: str = "all") -> dict:
    from .evaluate import parse_instructions, run_per_instruction

    t = time.perf_counter()
    r = run_per_instruction(
        make_policy,
        parse_instructions(instructions),
        episodes=episodes,
        seed=seed,
        cfg=env_config(),
    )
    return {
        k: r[k]
        for k in (
            "success_rate",
            "min_success_rate",
            "correct",
            "wrong",
            "missed",
            "dropped",
            "episodes",
        )
    } | {
        "per_instruction": {k: v["success_rate"] for k, v in r["per_instruction"].items()},
        "wall_s": round(time.perf_counter() - t, 1),
    }


# -- export -----------------------------------------------------------------------------------
def export_graphs(net, stats, out: Path, distilled=None) -> list[Path]:
    """prefix.onnx, step.onnx (and step_distilled.onnx) into `out`; returns their paths."""
    import torch

    from models.flow_train import OPSET, export_step

    out.mkdir(parents=True, exist_ok=True)
    k = _visible_k()
    dummy = (
        torch.zeros(1, k, 4),
        torch.zeros(1, 8),
        torch.full((1, 1), -1.0),
        torch.tensor([[0, 1, 2]], dtype=torch.int32),
    )
    paths = [out / "prefix.onnx", out / "step.onnx"]
    with torch.no_grad():
        torch.onnx.export(
            prefix_module(net, stats),
            dummy,
            str(paths[0]),
            input_names=list(OBS_KEYS),
            output_names=["obs_emb", "anchor"],
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
        )
    export_step(net, paths[1])
    if distilled is not None:
        paths.append(out / "step_distilled.onnx")
        export_step(distilled, paths[2])
    return paths


def _visible_k() -> int:
    from .lerobot_act import visible_k

    return visible_k()


def parity(
    net, stats, paths: list[Path], data: dict, rows: int = 50, seed: int = 0, distilled=None
) -> dict:
    """Max |ONNX Runtime - torch| of the prefix outputs and of 10-step (and the distilled
    1-step) chunks, from the same noise, on `rows` dataset rows; and with a committed prefix
    of MAX_COMMITTED waypoints, the largest change to it (0: returned exactly)."""
    import torch

    from models.flow_train import euler_onnx, integrate, ort_session

    pre_s, step_s = ort_session(paths[0]), ort_session(paths[1])
    dist_s = ort_session(paths[2]) if distilled is not None else None
    pre = prefix_module(net, stats)
    rng = np.random.default_rng(seed)
    worst = {"prefix": 0.0, "chunk_10": 0.0, "chunk_distilled_1": 0.0, "committed_change": 0.0}
    for i in rng.choice(len(data["gantry"]), min(rows, len(data["gantry"])), replace=False):
        feed = {k: np.ascontiguousarray(data[k][i : i + 1]) for k in OBS_KEYS}
        noise = rng.standard_normal((1, H, D)).astype(np.float32)
        with torch.no_grad():
            emb, anchor = pre(*(torch.from_numpy(v) for v in feed.values()))
            ref = integrate(net, emb, anchor, torch.from_numpy(noise), 10).numpy()
        got_pre = pre_s.run(["obs_emb", "anchor"], feed)
        worst["prefix"] = max(
            worst["prefix"],
            float(np.abs(got_pre[0] - emb.numpy()).max()),
            float(np.abs(got_pre[1] - anchor.numpy()).max()),
        )
        pf = {"obs_emb": got_pre[0], "anchor": got_pre[1]}
        got = euler_onnx(step_s, pf, noise, 10)
        worst["chunk_10"] = max(worst["chunk_10"], float(np.abs(got - ref).max()))
        held = euler_onnx(step_s, pf, noise, 10, committed=ref, n_committed=MAX_COMMITTED)
        worst["committed_change"] = max(
            worst["committed_change"],
            float(np.abs(held[:, :MAX_COMMITTED] - ref[:, :MAX_COMMITTED]).max()),
        )
        if dist_s is not None:
            with torch.no_grad():
                ref1 = integrate(distilled, emb, anchor, torch.from_numpy(noise), 1).numpy()
            got1 = euler_onnx(dist_s, pf, noise, 1)
            worst["chunk_distilled_1"] = max(
                worst["chunk_distilled_1"], float(np.abs(got1 - ref1).max())
            )
    return {
        "rows": int(min(rows, len(data["gantry"]))),
        "max_abs_diff": worst,
        "space": "normalised action coordinates (before the affine)",
    }


def package(
    checkpoint, out, distilled=None, parity_data=(), card: dict | None = None, steps=(10, 4, 2, 1)
) -> dict:
    """Export the graphs and write the flow model directory through models.flow_package;
    `steps` the levels' step counts (falling; a 1-step level runs the distilled graph where
    there is one)."""
    import tempfile

    from models.flow_package import package_flow

    from .config import CellConfig, action_spec

    net, extra = _load(checkpoint)
    student = _load(distilled)[0] if distilled else None
    stats = extra["stats"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = export_graphs(net, stats, Path(tmp), student)
        par = (
            parity(net, stats, paths, load_data(list(parity_data))[0], distilled=student)
            if parity_data
            else None
        )
        levels = [(k, 1 if k == 1 and student is not None else 0) for k in steps]
        card = {
            "name": "conveyor-flow",
            "max_committed": MAX_COMMITTED,
            "parity": par,
            **(card or {}),
        }
        return package_flow(
            out,
            paths[0],
            paths[1:],
            levels,
            action_spec(CellConfig(), horizon=H),
            affine={"scale": stats["act_scale"], "offset": stats["act_offset"]},
            card=card,
        )


# -- CLI --------------------------------------------------------------------------------------
def _load(path):
    from models.flow_train import load

    net, extra = load(path)
    return net, extra


def cmd_train(a) -> dict:
    import torch

    from models.flow_train import FlowConfig, FlowNet, save, train_flow

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    data, lineage = load_data(a.data, a.relabel, a.weights, a.per_state)
    stats = json.loads(Path(a.stats).read_text()) if a.stats else stats_of(data)
    cond, y = training_tensors(data, stats)
    print(json.dumps({"rows": len(cond), "data_s": round(time.perf_counter() - t0, 1)}), flush=True)
    if a.init:
        net, old = _load(a.init)
        stats = old["stats"]
        cond, y = training_tensors(data, stats)
    else:
        net = FlowNet(
            FlowConfig(
                cond_dim=cond.shape[1],
                horizon=H,
                action_dim=D,
                width=a.width,
                layers=a.layers,
                ff=4 * a.width,
                max_committed=MAX_COMMITTED,
            )
        )
    hist = train_flow(
        net,
        cond,
        y,
        steps=a.steps,
        batch=a.batch,
        lr=a.lr,
        seed=a.seed,
        rtc_prob=a.rtc_prob,
        log_every=a.log_every,
        log=lambda s: print(s, flush=True),
    )
    extra = {
        "stats": stats,
        "data": lineage,
        "rows": len(cond),
        "steps": a.steps,
        "batch": a.batch,
        "lr": a.lr,
        "seed": a.seed,
        "rtc_prob": a.rtc_prob,
        "init": a.init,
        "loss": hist,
        "params": sum(p.numel() for p in net.parameters()),
        "command": "python -m examples.conveyor_sorting.flow_policy " + " ".join(sys.argv[1:]),
    }
    save(net, a.out, extra)
    return {
        "params": extra["params"],
        "rows": len(cond),
        "final_loss": hist[-1]["loss"],
        "train_s": hist[-1]["s"],
    }


def cmd_distill(a) -> dict:
    import torch

    from models.flow_train import distill_one_step, save

    torch.set_num_threads(a.threads)
    teacher, extra = _load(a.checkpoint)
    data, lineage = load_data(a.data, a.relabel, None, a.per_state)
    cond, y = training_tensors(data, extra["stats"])
    student, hist = distill_one_step(
        teacher,
        cond,
        y_rel=y,
        steps=a.steps,
        batch=a.batch,
        lr=a.lr,
        seed=a.seed,
        log_every=a.log_every,
        student_prefix=a.student_prefix,
        log=lambda s: print(s, flush=True),
    )
    save(
        student,
        a.out,
        {
            "stats": extra["stats"],
            "teacher": a.checkpoint,
            "data": lineage,
            "distill": {
                "method": "reflow distillation to one step (InstaFlow-style)",
                "teacher_steps": 10,
                "committed_prefix": "the rows' expert chunks",
                "student_prefix": a.student_prefix,
                "steps": a.steps,
                "batch": a.batch,
                "lr": a.lr,
                "loss": hist,
            },
        },
    )
    return {"final_loss": hist[-1]["loss"], "s": hist[-1]["s"]}


def cmd_eval(a) -> dict:
    import torch

    torch.set_num_threads(a.threads)
    if a.dir:
        pols = []
        r = lockstep(dir_policy(a.dir, a.level, a.seed, pols), a.episodes, a.seed, a.instructions)
        ns = np.concatenate([p.chunk_ns for p in pols]) / 1e6
        return r | {
            "level": a.level,
            "chunk_ms": {
                "p50": round(float(np.median(ns)), 3),
                "p99": round(float(np.percentile(ns, 99)), 3),
                "runs": int(len(ns)),
            },
        }
    net, extra = _load(a.checkpoint)
    return lockstep(
        lambda env: TorchFlowPolicy(net, extra["stats"], a.steps, a.seed, a.noise),
        a.episodes,
        a.seed,
        a.instructions,
    ) | {"steps": a.steps}


def cmd_dagger(a) -> dict:
    import torch

    torch.set_num_threads(a.threads)
    if a.dir:
        make = dir_policy(a.dir, a.level, a.seed)
    else:
        net, extra = _load(a.checkpoint)
        make = lambda env: TorchFlowPolicy(net, extra["stats"], a.steps, a.seed)  # noqa: E731
    r = collect(a.episodes, a.out, a.seed, make_policy=make, beta=a.beta)
    r.pop("per_instruction", None)
    return r


def cmd_latency(a) -> dict:
    """Each level's compute through the node's FlowRunner (1 thread) on dataset rows: the
    whole cycle, and the prefix and the steps apart (ms, p50 / p99)."""
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.model.flow_model import FlowModelDir

    model = FlowModelDir.load(a.dir)
    runner = FlowRunner(model, threads=1)
    data = load_data(a.data)[0]
    rng = np.random.default_rng(0)
    rows = rng.choice(len(data["gantry"]), a.runs, replace=True)
    out = {}
    for lv in range(len(model.levels)):
        t_all, t_pre, t_steps = [], [], []
        for j, i in enumerate(rows):
            feed = {k: np.ascontiguousarray(data[k][i : i + 1]) for k in OBS_KEYS}
            t0 = time.perf_counter_ns()
            runner.start(seed=(0, lv, j))
            runner.encode(feed)
            t1 = time.perf_counter_ns()
            runner.integrate(lv)
            t2 = time.perf_counter_ns()
            t_all.append(t2 - t0)
            t_pre.append(t1 - t0)
            t_steps.append(t2 - t1)
        q = lambda v, p: round(float(np.percentile(np.asarray(v[20:]) / 1e6, p)), 3)  # noqa: E731
        out[str(lv)] = {
            "steps": model.levels[lv]["steps"],
            "graph": model.levels[lv]["graph"],
            "cycle_ms": {"p50": q(t_all, 50), "p99": q(t_all, 99)},
            "prefix_ms": {"p50": q(t_pre, 50), "p99": q(t_pre, 99)},
            "steps_ms": {"p50": q(t_steps, 50), "p99": q(t_steps, 99)},
            "runs": a.runs - 20,
        }
    return {"levels": out, "threads": 1, "load_1min": round(__import__("os").getloadavg()[0], 2)}


def cmd_package(a) -> dict:
    """Package; with --levels-json (cmd eval --dir results per level) the card gets each
    level's success and latency, and the ladder is named in the card."""
    card = json.loads(Path(a.card).read_text()) if a.card else {}
    card = package(a.checkpoint, a.out, a.distilled, a.parity_data, card, a.steps)
    return {k: card[k] for k in ("levels", "parity") if k in card}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.flow_policy", description=__doc__.splitlines()[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--episodes", type=int, default=40)
    c.add_argument("--seed", type=int, default=500)
    c.add_argument("--noise-m", type=float, default=0.0)
    c.add_argument("--out", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", nargs="+", required=True)
    t.add_argument("--weights", nargs="+", type=float, default=None)
    t.add_argument("--relabel", nargs="*", default=[])
    t.add_argument("--per-state", type=int, default=2)
    t.add_argument("--stats", default=None)
    t.add_argument("--init", default=None, help="checkpoint to continue from (keeps its stats)")
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=6000)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--width", type=int, default=64)
    t.add_argument("--layers", type=int, default=4)
    t.add_argument("--rtc-prob", type=float, default=0.5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--log-every", type=int, default=200)
    d = sub.add_parser("distill")
    d.add_argument("--checkpoint", required=True)
    d.add_argument("--data", nargs="+", required=True)
    d.add_argument("--relabel", nargs="*", default=[])
    d.add_argument("--per-state", type=int, default=1)
    d.add_argument("--out", required=True)
    d.add_argument("--steps", type=int, default=1500)
    d.add_argument("--batch", type=int, default=128)
    d.add_argument("--lr", type=float, default=2e-4)
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--threads", type=int, default=1)
    d.add_argument("--log-every", type=int, default=100)
    d.add_argument(
        "--student-prefix",
        choices=["own", "teacher"],
        default="own",
        help="the student's encoder trains along (own) or it reads the teacher's",
    )
    for name in ("eval", "dagger"):
        e = sub.add_parser(name)
        e.add_argument("--checkpoint", default=None)
        e.add_argument(
            "--dir",
            default=None,
            help="a packaged model directory (the node's FlowRunner) instead of --checkpoint",
        )
        e.add_argument("--level", type=int, default=0)
        e.add_argument("--steps", type=int, default=10)
        e.add_argument("--episodes", type=int, default=2)
        e.add_argument("--seed", type=int, default=0)
        e.add_argument("--threads", type=int, default=1)
        if name == "eval":
            e.add_argument("--instructions", default="all")
            e.add_argument(
                "--noise",
                type=float,
                default=1.0,
                help="initial noise scale (torch checkpoints; 0: zero noise)",
            )
        else:
            e.add_argument("--out", required=True)
            e.add_argument("--beta", type=float, default=0.0)
    lt = sub.add_parser("latency")
    lt.add_argument("--dir", required=True)
    lt.add_argument("--data", nargs="+", required=True)
    lt.add_argument("--runs", type=int, default=520)
    k = sub.add_parser("package")
    k.add_argument("--checkpoint", required=True)
    k.add_argument("--distilled", default=None)
    k.add_argument("--out", required=True)
    k.add_argument("--parity-data", nargs="*", default=[])
    k.add_argument("--card", default=None, help="JSON merged into card.json (figures)")
    k.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[10, 4, 2, 1],
        help="each level's step count, falling (1: the distilled graph if given)",
    )
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        r = collect(a.episodes, a.out, a.seed, a.noise_m)
        r.pop("per_instruction", None)
    else:
        r = {
            "train": cmd_train,
            "distill": cmd_distill,
            "eval": cmd_eval,
            "dagger": cmd_dagger,
            "package": cmd_package,
            "latency": cmd_latency,
        }[a.cmd](a)
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
