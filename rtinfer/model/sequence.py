"""The one token layout shared by training and the inference node (numpy only).

    position: 0     1 .. C        C+1 .. C+L     C+L+1   C+L+2 .. C+L+1+H*D
    token:    [BOS] [instruction] [observation]  [SEP]   [action tokens, waypoint-major]

- The instruction prefix `[BOS][instruction]` (1 + C tokens) depends only on the task, so
  the inference node keeps its KV cached across cycles and prefills only
  `[observation][SEP]` (L + 1 tokens) per cycle.
- The logits at position p predict the token at p + 1: the SEP's logits give the first
  action token. Action token j (0-based, j = waypoint * D + dim) sits at position
  `prefix_len + j` where prefix_len = C + L + 2.
- Ids here are *vocab* ids (models.config.Vocab layout); the inputs are raw ids in each
  range (instruction ids in [0, n_instr), observation bins in [0, n_obs_bins), action
  bins in [0, n_action_bins)). Out-of-range raw ids raise ValueError.
Training builds sequences with `build_sequence` and takes its loss at `target_positions`;
runtime uses `instruction_prefix` + `observation_segment`; both agree by construction.
"""

from __future__ import annotations

import numpy as np


def _check(raw, n: int, what: str) -> np.ndarray:
    a = np.asarray(raw, dtype=np.int64).reshape(-1)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise ValueError(f"{what} id outside [0, {n}): min {a.min()}, max {a.max()}")
    return a


def instruction_prefix(vocab, instr_tokens) -> np.ndarray:
    """(1 + C,) int64 vocab ids: [BOS][instruction]. The KV-cached part."""
    instr = _check(instr_tokens, vocab.n_instr, "instruction")
    out = np.empty(1 + instr.size, np.int64)
    out[0] = vocab.special("BOS")
    out[1:] = instr + vocab.instr_start
    return out


def observation_segment(vocab, obs_tokens) -> np.ndarray:
    """(L + 1,) int64 vocab ids: [observation][SEP]. Prefilled every cycle."""
    obs = _check(obs_tokens, vocab.n_obs_bins, "observation")
    out = np.empty(obs.size + 1, np.int64)
    out[:-1] = obs + vocab.obs_start
    out[-1] = vocab.special("SEP")
    return out


def build_prefix(vocab, instr_tokens, obs_tokens) -> np.ndarray:
    """(C + L + 2,) int64 vocab ids: everything before the first action token."""
    return np.concatenate(
        [instruction_prefix(vocab, instr_tokens), observation_segment(vocab, obs_tokens)]
    )


def prefix_len(n_instr: int, n_obs: int) -> int:
    """Length of build_prefix's output for C instruction and L observation tokens."""
    return n_instr + n_obs + 2


def action_positions(n_instr: int, n_obs: int, n_actions: int) -> np.ndarray:
    """(n_actions,) positions of the action tokens in the full sequence."""
    start = prefix_len(n_instr, n_obs)
    return np.arange(start, start + n_actions, dtype=np.int64)


def target_positions(n_instr: int, n_obs: int, n_actions: int) -> np.ndarray:
    """(n_actions,) positions whose logits predict the action tokens (action_positions - 1)."""
    return action_positions(n_instr, n_obs, n_actions) - 1


def build_sequence(vocab, instr_tokens, obs_tokens, action_bins) -> np.ndarray:
    """(C + L + 2 + H*D,) int64: prefix followed by the action tokens (bins (H, D) or flat)."""
    act = _check(action_bins, vocab.n_action_bins, "action bin") + vocab.action_start
    return np.concatenate([build_prefix(vocab, instr_tokens, obs_tokens), act])
