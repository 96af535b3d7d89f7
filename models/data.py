"""Demonstration datasets -> training sequences (numpy; torch only at batching time).

A dataset is an `.npz` written by a collector (e.g. examples/conveyor_sorting/collect.py):
`instruction_tokens` (N, C), `obs_tokens` (N, L), `action_tokens` (N, H, D), plus JSON
strings `tokenizer_config` and `obs_tokens_spec`. `models` never imports the cell: the
file is the interface. Sequences use rtinfer.model.sequence, the layout the inference node runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from rtinfer.model import sequence

from .config import Vocab


@dataclass
class Demos:
    seqs: np.ndarray  # (N, T) int64 vocab ids
    targets: np.ndarray  # (A,) positions whose logits predict the action tokens
    vocab: Vocab
    n_instr_tokens: int  # C
    n_obs_tokens: int  # L
    tokenizer_config: dict
    obs_tokens_spec: dict
    instructions: np.ndarray  # (N, C) raw instruction ids, for held-out splits

    def __len__(self) -> int:
        return len(self.seqs)

    def subset(self, mask: np.ndarray) -> Demos:
        return Demos(
            self.seqs[mask],
            self.targets,
            self.vocab,
            self.n_instr_tokens,
            self.n_obs_tokens,
            self.tokenizer_config,
            self.obs_tokens_spec,
            self.instructions[mask],
        )


def _read(path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict, dict]:
    with np.load(path, allow_pickle=False) as z:
        instr, obs = z["instruction_tokens"].astype(np.int64), z["obs_tokens"].astype(np.int64)
        act = z["action_tokens"].astype(np.int64).reshape(len(obs), -1)
        tok, spec = json.loads(str(z["tokenizer_config"])), json.loads(str(z["obs_tokens_spec"]))
    return instr, obs, act, tok, spec


def load(paths, *, exclude_instructions: list[list[int]] = ()) -> Demos:
    """Load one dataset or several (same tokenizers, else ValueError); rows whose instruction
    is in `exclude_instructions` are dropped (held out for evaluation). No pickle: every
    array is plain numeric or a 0-d unicode string."""
    parts = [
        _read(p)
        for p in (
            [paths] if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__") else paths
        )
    ]
    tok, spec = parts[0][3], parts[0][4]
    if any(p[3] != tok or p[4] != spec for p in parts[1:]):
        raise ValueError(
            "datasets were collected with different tokenizer configs; "
            "re-collect them with one config"
        )
    instr, obs, act = (np.concatenate([p[i] for p in parts]) for i in range(3))
    keep = np.ones(len(obs), bool)
    for ex in exclude_instructions:
        keep &= ~(instr == np.asarray(ex)).all(axis=1)
    instr, obs, act = instr[keep], obs[keep], act[keep]
    vocab = Vocab(
        n_instr=int(spec["instruction"]["classes"]),
        n_obs_bins=int(spec["bins"]),
        n_action_bins=int(tok["bins"]),
    )
    c, l = instr.shape[1], obs.shape[1]
    seqs = np.empty((len(obs), sequence.prefix_len(c, l) + act.shape[1]), np.int64)
    for i in range(len(obs)):
        seqs[i] = sequence.build_sequence(vocab, instr[i], obs[i], act[i])
    return Demos(seqs, sequence.target_positions(c, l, act.shape[1]), vocab, c, l, tok, spec, instr)


def split(demos: Demos, val_fraction: float, seed: int) -> tuple[Demos, Demos]:
    """Random row split (rows of one episode are correlated; fine for a loss curve)."""
    rng = np.random.default_rng(seed)
    val = rng.random(len(demos)) < val_fraction
    return demos.subset(~val), demos.subset(val)
