"""A model directory as an env policy: the inference node's ChunkRunner, in lockstep.

The observation goes through the same wire body and spec-driven tokenizer as on the robot
(obs_body -> ObsTokens), so lockstep evaluation measures the exact runtime path.
"""
from __future__ import annotations

import numpy as np

from rtinfer.inference.budget import BudgetLevel
from rtinfer.model.directory import ModelDir
from rtinfer.inference.runner import ChunkRunner
from rtinfer.model.action_tokens import ActionTokenizer

from .env import ConveyorSortEnv
from .observe import obs_body


class ModelPolicy:
    """reset() / act(obs) -> (H, D) chunk, decoded greedily at `exit_depth`."""

    def __init__(self, model: ModelDir, env: ConveyorSortEnv, *, exit_depth: int | None = None,
                 backend: str = "onnx", drafter: str = "chunk", threads: int = 1):
        if model.tokenizer.hash != env.tokenizer_cfg.hash:
            raise ValueError(f"{model.path}: action tokenizer {model.tokenizer.hash} does not "
                             f"match the cell's ({env.tokenizer_cfg.hash}); re-export the model")
        opts = {"threads": threads} if backend == "onnx" else {}
        self.runner = ChunkRunner(model, backend=backend, backend_opts=opts, drafter=drafter)
        depth = exit_depth or model.n_layer
        spec = self.runner.decoder.k_verify - 1 if depth == model.n_layer else 0
        self.level = BudgetLevel(depth, spec, model.tokenizer.horizon)
        self.tok, self.env = ActionTokenizer(model.tokenizer), env
        self.shape = (model.tokenizer.horizon, model.tokenizer.dim)

    def reset(self) -> None:
        self.runner.reset()

    def act(self, obs: dict) -> np.ndarray:
        instr, obs_tokens = self.runner.model.obs.encode(obs_body(obs))
        bins, _ = self.runner.run(instr, obs_tokens, self.env.cell.t_ns, self.level)
        return self.tok.decode(bins.reshape(self.shape).astype(np.int32))


def model_factory(path, **opts):
    """A run_policy factory for the model directory at `path`."""
    model = ModelDir.load(path)
    return lambda env: ModelPolicy(model, env, **opts)
