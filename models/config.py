"""Policy and vocabulary configuration: plain dataclasses, JSON round-trip, no torch.

Kept torch-free so anything that only needs the token layout (dataset writers, manifest
readers) can import it without pulling in torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from rtinfer.model.vocab import VocabLayout


@dataclass(frozen=True)
class PolicyConfig:
    """Decoder-only transformer hyper-parameters (nanoGPT style).

    exits: block counts after which an early exit (shared final norm + LM head) is
    available; full depth (n_layer) is always available and is not listed here.
    layer_dropout: LayerSkip stochastic depth; block l (0-based) is skipped per sample
    with probability layer_dropout * l / (n_layer - 1) while training.
    """

    vocab_size: int
    n_layer: int = 6
    n_head: int = 4
    n_embd: int = 128
    max_ctx: int = 128
    exits: tuple[int, ...] = (2, 4)
    dropout: float = 0.0
    layer_dropout: float = 0.0
    bias: bool = True

    def __post_init__(self):
        object.__setattr__(self, "exits", tuple(sorted(set(int(e) for e in self.exits))))
        if self.vocab_size < 1 or self.max_ctx < 1 or self.n_layer < 1:
            raise ValueError(f"vocab_size, max_ctx and n_layer must be >= 1, got {self}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if any(not 1 <= e < self.n_layer for e in self.exits):
            raise ValueError(f"exits {self.exits} must lie in [1, n_layer={self.n_layer})")
        if not (0.0 <= self.dropout < 1.0 and 0.0 <= self.layer_dropout < 1.0):
            raise ValueError("dropout and layer_dropout must lie in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def depths(self) -> tuple[int, ...]:
        """Every selectable depth: the early exits then full depth."""
        return self.exits + (self.n_layer,)

    def kv_shape(self, batch: int = 1) -> tuple[int, int, int, int, int, int]:
        """Static KV cache shape: (n_layer, 2 [k, v], batch, n_head, max_ctx, head_dim)."""
        return (self.n_layer, 2, batch, self.n_head, self.max_ctx, self.head_dim)

    @classmethod
    def demo(cls, vocab_size: int, max_ctx: int = 128, **kw) -> PolicyConfig:
        """Small model: ~1.2 M params, sub-millisecond-class CPU decode step."""
        base = dict(n_layer=6, n_head=4, n_embd=128, exits=(2, 4))
        return cls(vocab_size=vocab_size, max_ctx=max_ctx, **{**base, **kw})

    @classmethod
    def bench(cls, vocab_size: int, max_ctx: int = 256, **kw) -> PolicyConfig:
        """GPT-2-small-shaped model (~85 M params + embeddings) for GPU benchmarks."""
        base = dict(n_layer=12, n_head=12, n_embd=768, exits=(4, 8))
        return cls(vocab_size=vocab_size, max_ctx=max_ctx, **{**base, **kw})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["exits"] = list(self.exits)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PolicyConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown PolicyConfig keys {sorted(unknown)}")
        return cls(**{**d, "exits": tuple(d.get("exits", ()))})


@dataclass(frozen=True)
class Vocab(VocabLayout):
    """rtinfer's VocabLayout (the ranges) with defaults, validation and checked mappings.
    Methods accept ints, numpy arrays or torch tensors (plain integer arithmetic);
    out-of-range ids raise ValueError."""

    n_instr: int
    n_obs_bins: int
    n_action_bins: int = 256
    specials: tuple[str, ...] = field(default=("PAD", "BOS", "SEP", "EOS"))

    def __post_init__(self):
        object.__setattr__(self, "specials", tuple(self.specials))
        if min(self.n_instr, self.n_obs_bins, self.n_action_bins) < 0 or self.n_action_bins == 0:
            raise ValueError(f"range sizes must be >= 0 and n_action_bins >= 1, got {self}")
        if len(set(self.specials)) != len(self.specials):
            raise ValueError(f"duplicate special tokens {self.specials}")

    # --- mappings ---------------------------------------------------------------------
    def instr_to_vocab(self, ids):
        return _offset(ids, self.n_instr, self.instr_start, "instruction token")

    def obs_to_vocab(self, bins):
        return _offset(bins, self.n_obs_bins, self.obs_start, "observation bin")

    def action_to_vocab(self, bins):
        """Action bin ids in [0, n_action_bins) (rtinfer.model.action_tokens output) -> vocab
        ids."""
        return _offset(bins, self.n_action_bins, self.action_start, "action bin")

    def vocab_to_action(self, ids):
        """Vocab ids in the action range -> action bin ids in [0, n_action_bins)."""
        return _offset(ids - self.action_start, self.n_action_bins, 0, "action vocab id")

    def is_action(self, ids):
        return (ids >= self.action_start) & (ids < self.action_stop)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["specials"] = list(self.specials)
        d.update(action_start=self.action_start, action_stop=self.action_stop, size=self.size)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Vocab:
        v = cls(
            n_instr=d["n_instr"],
            n_obs_bins=d["n_obs_bins"],
            n_action_bins=d["n_action_bins"],
            specials=tuple(d["specials"]),
        )
        if "size" in d and d["size"] != v.size:
            raise ValueError(f"vocab size mismatch: file says {d['size']}, layout gives {v.size}")
        return v


def _offset(x, n: int, start: int, what: str):
    """x + start after checking 0 <= x < n (works on int, numpy and torch alike)."""
    if isinstance(x, (int, np.integer)):
        bad = not 0 <= x < n
    else:
        bad = bool(((x < 0) | (x >= n)).any())
    if bad:
        raise ValueError(f"{what} out of range [0, {n})")
    return x + start
