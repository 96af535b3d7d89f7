"""Action tokenizer: uniform bins per action dimension, as in RT-2 and OpenVLA.

A waypoint is D tokens (x, y, z, suction); a chunk is `horizon` waypoints; waypoint i of
a chunk targets time capture + (i + 1) * period_ns. The config ships with the model and
is checked by `hash` when a controller connects.

Why period_ns = 50 ms by default: it equals the policy period at 20 Hz, so a chunk of
H = 4 spans 200 ms (two deadlines of look-ahead when a cycle is lost), and waypoint i+1
of one chunk lines up in time with waypoint i of the next, which makes the previous
chunk shifted by one waypoint an exact-time draft for speculative decoding.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from rtinfer.model.action_spec import content_hash


@dataclass(frozen=True)
class TokenizerConfig:
    """Per-dimension limits (low < high), bins per dimension, chunk horizon and timing."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    bins: int = 256
    horizon: int = 4
    names: tuple[str, ...] = ("x", "y", "z", "suction")
    period_ns: int = 50_000_000

    def __post_init__(self):
        # Canonical types, so (0, 1) and (0.0, 1.0) hash the same.
        object.__setattr__(self, "low", tuple(float(v) for v in self.low))
        object.__setattr__(self, "high", tuple(float(v) for v in self.high))
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))
        d = len(self.names)
        if len(self.low) != d or len(self.high) != d:
            raise ValueError(
                f"low/high need {d} values (one per name {self.names}), "
                f"got {len(self.low)}/{len(self.high)}"
            )
        if not all(
            np.isfinite(lo) and np.isfinite(hi) and lo < hi for lo, hi in zip(self.low, self.high)
        ):
            raise ValueError(f"every dimension needs finite low < high, got {self.low} {self.high}")
        if int(self.bins) < 2 or int(self.horizon) < 1 or int(self.period_ns) <= 0:
            raise ValueError("need bins >= 2, horizon >= 1 and period_ns > 0")

    @property
    def dim(self) -> int:
        return len(self.names)

    @cached_property
    def hash(self) -> str:
        """action_spec.content_hash of to_dict(): sha256 over its canonical msgpack bytes."""
        return content_hash(self.to_dict())

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> TokenizerConfig:
        """Build from a dict; a "hash" entry, if present, must match (catches edited files)."""
        known = {"low", "high", "bins", "horizon", "names", "period_ns"}
        unknown = set(d) - known - {"hash"}
        if unknown:
            raise ValueError(f"unknown tokenizer config keys {sorted(unknown)}")
        fields: dict = {
            k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known
        }
        cfg = cls(**fields)
        if "hash" in d and d["hash"] != cfg.hash:
            raise ValueError(
                f"tokenizer config hash {d['hash']} does not match its content "
                f"({cfg.hash}); the file was edited or is corrupt"
            )
        return cfg

    def save(self, path: str | Path) -> None:
        """Write JSON with the hash included, for people and for `load` to verify."""
        Path(path).write_text(json.dumps({**self.to_dict(), "hash": self.hash}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TokenizerConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


class ActionTokenizer:
    """Values <-> token ids. Not thread-safe (the `clipped` counter); one per loop.

    Token k of dimension j decodes to the centre of its bin: low[j] + (k + 0.5) * width[j].
    """

    def __init__(self, cfg: TokenizerConfig):
        self.cfg = cfg
        self.low = np.asarray(cfg.low, dtype=np.float64)
        self.high = np.asarray(cfg.high, dtype=np.float64)
        self.bin_width = (self.high - self.low) / cfg.bins
        self._inv_width = 1.0 / self.bin_width
        self.clipped = 0  # number of values outside [low, high] that encode() clipped

    def encode(self, values: np.ndarray) -> np.ndarray:
        """(..., D) float -> (..., D) int32. Out-of-range values clip to the end bins and are
        counted in `clipped`; non-finite values raise ValueError (there is no bin for them)."""
        v = np.asarray(values, dtype=np.float64)
        if v.shape[-1:] != (self.cfg.dim,):
            raise ValueError(f"expected last dimension {self.cfg.dim}, got shape {v.shape}")
        if not np.isfinite(v).all():
            raise ValueError("cannot tokenize non-finite action values")
        self.clipped += int(np.count_nonzero((v < self.low) | (v > self.high)))
        t = np.floor((v - self.low) * self._inv_width)
        return np.clip(t, 0, self.cfg.bins - 1).astype(np.int32)

    def decode(self, tokens: np.ndarray) -> np.ndarray:
        """(..., D) integer ids -> (..., D) float32 bin centres.

        Raises rtinfer.transport.wire.WireError for a wrong shape, a non-integer dtype or an id
        outside
        [0, bins): tokens come off the wire, and the robot side must never guess."""
        t = np.asarray(tokens)
        if t.shape[-1:] != (self.cfg.dim,) or t.dtype.kind not in "iu":
            from rtinfer.transport.wire import WireError

            raise WireError(
                f"action tokens must be integers of shape (..., {self.cfg.dim}), "
                f"got {t.dtype} {t.shape}"
            )
        if t.size and (t.min() < 0 or t.max() >= self.cfg.bins):
            from rtinfer.transport.wire import WireError

            raise WireError(
                f"action token id outside [0, {self.cfg.bins}): "
                f"min {t.min()}, max {t.max()}; check the tokenizer config hash"
            )
        return (self.low + (t + 0.5) * self.bin_width).astype(np.float32)
