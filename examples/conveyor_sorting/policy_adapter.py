"""A model directory as an env policy: the inference node's TokenRunner, in lockstep.

The observation goes through the same wire body and spec-driven tokenizer as on the robot
(obs_body -> ObsTokens), so lockstep evaluation measures the exact runtime path.
"""

from __future__ import annotations

import time

import numpy as np

from rtinfer.inference.budget import BudgetLevel, default_levels
from rtinfer.inference.graph_runner import GraphRunner
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.model.chunk_model import ChunkModelDir, load_model
from rtinfer.model.directory import ModelDir

from .config import action_spec
from .env import ConveyorSortEnv
from .observe import obs_body


class ModelPolicy:
    """reset() / act(obs) -> (chunk, D) waypoints, decoded greedily at `exit_depth` with the
    `precision` graph set (None: fp32; ONNX Runtime only), or at `level`: a BudgetLevel, or
    an index into the model's budget levels as the node numbers them (budget.default_levels,
    the node's --level; -1 the cheapest). chunk_ns / chunk_cpu_ns: each
    act's compute (wall and this thread's CPU time), for the level's cost."""

    def __init__(
        self,
        model: ModelDir,
        env: ConveyorSortEnv,
        *,
        exit_depth: int | None = None,
        backend: str = "onnx",
        drafter: str = "chunk",
        threads: int = 1,
        precision: str | None = None,
        level: BudgetLevel | int | None = None,
    ):
        if model.tokenizer.hash != env.tokenizer_cfg.hash:
            raise ValueError(
                f"{model.path}: action tokenizer {model.tokenizer.hash} does not "
                f"match the cell's ({env.tokenizer_cfg.hash}); re-export the model"
            )
        opts = {"threads": threads} if backend == "onnx" else {}
        if precision:
            opts["precision"] = precision
        self.runner = TokenRunner(model, backend=backend, backend_opts=opts, drafter=drafter)
        k_verify = self.runner.decoder.k_verify
        if isinstance(level, int):
            ladder = default_levels(model, k_verify, gates=self.runner.backend.gates)
            if not -len(ladder) <= level < len(ladder):
                raise ValueError(
                    f"this model has {len(ladder)} budget levels (0 .. "
                    f"{len(ladder) - 1}, or -1 for the cheapest)"
                )
            level = ladder[level]
        if level is None:
            depth = exit_depth or model.n_layer
            spec = k_verify - 1 if depth == model.n_layer else 0
            level = BudgetLevel(depth, spec, model.tokenizer.horizon)
        self.level, self.tok, self.env = level, ActionTokenizer(model.tokenizer), env
        self.shape = (level.chunk, model.tokenizer.dim)
        self.chunk_ns: list[int] = []
        self.chunk_cpu_ns: list[int] = []

    def reset(self) -> None:
        self.runner.reset()

    def act(self, obs: dict) -> np.ndarray:
        instr, obs_tokens = self.runner.model.obs.encode(obs_body(obs))
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        bins, _ = self.runner.run(instr, obs_tokens, self.env.cell.t_ns, self.level)
        self.chunk_ns.append(time.perf_counter_ns() - t0)
        self.chunk_cpu_ns.append(time.thread_time_ns() - c0)
        return self.tok.decode(bins.reshape(self.shape).astype(np.int32))


class ChunkModelPolicy:
    """reset() / act(obs) -> (H, D) chunk of a continuous-chunk model directory at `level`,
    through the inference node's GraphRunner and the same obs wire body."""

    def __init__(
        self, model: ChunkModelDir, env: ConveyorSortEnv, *, level: int = 0, threads: int = 1
    ):
        want = action_spec(env.cfg.cell, horizon=env.cfg.horizon)
        if model.action.hash != want.hash:
            raise ValueError(
                f"{model.path}: its action spec differs from the cell's: "
                + "; ".join(want.differences(model.action))
            )
        self.runner, self.level, self.model = GraphRunner(model, threads=threads), level, model

    def reset(self) -> None:
        self.runner.reset()

    def act(self, obs: dict) -> np.ndarray:
        body = obs_body(obs)
        if not self.model.obs.cameras:  # a vector policy in a camera env: as a robot would
            body.pop("frames", None)
        return self.runner.run(self.model.obs.feeds(body), self.level).copy()


class FlowModelPolicy:
    """reset() / act(obs) -> (H, D) chunk of a flow model directory at `level` through the
    inference node's FlowRunner and the same obs wire body; the initial noise is seeded per
    cycle from (seed, episode, cycle), as the node seeds it from (seed, robot, seq).
    chunk_ns: each act's compute (wall)."""

    def __init__(
        self, model, env: ConveyorSortEnv, *, level: int = 0, threads: int = 1, seed: int = 0
    ):
        from rtinfer.inference.flow_runner import FlowRunner

        want = action_spec(env.cfg.cell, horizon=env.cfg.horizon)
        if model.action.hash != want.hash:
            raise ValueError(
                f"{model.path}: its action spec differs from the cell's: "
                + "; ".join(want.differences(model.action))
            )
        self.runner, self.level, self.model = FlowRunner(model, threads=threads), level, model
        self.seed, self.episode, self.cycle = seed, -1, 0
        self.chunk_ns: list[int] = []

    def reset(self) -> None:
        self.episode, self.cycle = self.episode + 1, 0

    def act(self, obs: dict) -> np.ndarray:
        body = obs_body(obs)
        if not self.model.obs.cameras:
            body.pop("frames", None)
        t0 = time.perf_counter_ns()
        chunk = self.runner.run(
            self.model.obs.feeds(body), self.level, seed=(self.seed, self.episode, self.cycle)
        ).copy()
        self.chunk_ns.append(time.perf_counter_ns() - t0)
        self.cycle += 1
        return chunk


def model_factory(path, *, exit_depth: int | None = None, level=None, **opts):
    """A run_policy factory for the model directory at `path` (any kind; for a
    continuous-chunk or flow policy `level`, else `exit_depth`, is its budget level)."""
    model = load_model(path)
    if model.kind == "flow":
        level = level if level is not None else 0 if exit_depth is None else exit_depth
        opts = {k: v for k, v in opts.items() if k in ("threads", "seed")}
        return lambda env: FlowModelPolicy(model, env, level=level, **opts)
    if model.kind == "chunk":
        level = level if level is not None else 0 if exit_depth is None else exit_depth
        opts = {k: v for k, v in opts.items() if k == "threads"}
        return lambda env: ChunkModelPolicy(model, env, level=level, **opts)
    return lambda env: ModelPolicy(model, env, exit_depth=exit_depth, level=level, **opts)
