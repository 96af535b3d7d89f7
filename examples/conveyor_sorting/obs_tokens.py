"""Observation and instruction tokens for the policy: fixed length, static shapes.

Observation sequence (length 9 + 3 K), every id in [0, bins):
  [x, y, z, vx, vy, vz, suction, holding] gantry, the held object's class (EMPTY when
  none), then per object slot (class, x, y).
Continuous fields are uniform bins between per-field limits (values outside clip to the
end bins); suction / holding are 0 or 1; an object slot's class token is its class id,
or EMPTY = num_classes for an unused slot (whose x, y tokens are then 0).
Instruction sequence (length C): token c = bin index for class c.
Field identity comes from the position in the sequence, so one vocabulary of `bins`
ids serves all fields; a model that wants disjoint vocabularies can offset per field.
`ObsTokenizerConfig.spec()` writes this layout as an rtinfer-obs-tokens v1 spec, and
`ObsTokenizer` encodes through rtinfer.model.obs_tokens.ObsTokens compiled from it: training
and the inference node tokenize with the same code.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from rtinfer.model.obs_tokens import ObsTokens

from .config import CellConfig


@dataclass(frozen=True)
class ObsTokenizerConfig:
    bins: int = 256
    num_classes: int = 3
    slots: int = 6
    pos_low: tuple[float, float, float] = (-0.7, -0.25, 0.28)
    pos_high: tuple[float, float, float] = (0.65, 0.6, 0.70)
    vel_max: float = 1.5  # m/s, symmetric range per axis
    obj_low: tuple[float, float] = (-0.7, -0.15)  # camera zone x, belt y
    obj_high: tuple[float, float] = (0.6, 0.15)

    @classmethod
    def for_cell(cls, cell: CellConfig, bins: int = 256) -> ObsTokenizerConfig:
        return cls(
            bins=bins,
            num_classes=cell.num_classes,
            slots=cell.visible_k,
            pos_low=cell.gantry_low,
            pos_high=cell.gantry_high,
            obj_low=(cell.camera_x[0], -cell.belt_half_width),
            obj_high=(cell.camera_x[1], cell.belt_half_width),
        )

    @property
    def length(self) -> int:
        return 9 + 3 * self.slots

    @property
    def empty(self) -> int:
        return self.num_classes

    @property
    def hash(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def spec(self) -> dict:
        """This layout as an rtinfer-obs-tokens v1 spec (JSON-able) for the inference node."""
        v = self.vel_max
        uni = [
            {"column": j + 1, "kind": "uniform", "low": self.obj_low[j], "high": self.obj_high[j]}
            for j in range(2)
        ]
        return {
            "format": "rtinfer-obs-tokens",
            "version": 1,
            "bins": self.bins,
            "fields": [
                {
                    "key": "gantry",
                    "slice": [0, 6],
                    "kind": "uniform",
                    "low": [*self.pos_low, -v, -v, -v],
                    "high": [*self.pos_high, v, v, v],
                },
                {"key": "gantry", "slice": [6, 8], "kind": "threshold", "at": 0.5},
                {"key": "held", "kind": "categorical", "classes": self.num_classes},
                {
                    "key": "objects",
                    "kind": "table",
                    "rows": self.slots,
                    "valid": {"column": 3, "above": 0.5},
                    "columns": [
                        {"column": 0, "kind": "categorical", "classes": self.num_classes},
                        *uni,
                    ],
                },
            ],
            "instruction": {
                "key": "instruction",
                "from": "values",
                "length": self.num_classes,
                "classes": self.num_classes,
            },
        }

    @classmethod
    def from_dict(cls, d: dict) -> ObsTokenizerConfig:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


class ObsTokenizer:
    """Observation dict (see observe.py) -> int32 tokens, through the inference node's own
    tokenizer (rtinfer.model.obs_tokens) compiled from `cfg.spec()`. Stateless; thread-safe.
    Raises ObsError for a malformed observation (NaN, a short array)."""

    def __init__(self, cfg: ObsTokenizerConfig):
        if cfg.num_classes + 1 > cfg.bins:
            raise ValueError("need bins > num_classes for the EMPTY class token")
        self.cfg = cfg
        self._tokens = ObsTokens(cfg.spec())

    def encode(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """(length,) int32 tokens for one observation."""
        values = {k: np.asarray(obs[k]) for k in ("gantry", "held", "objects")}
        return self._tokens.observation(values).astype(np.int32)

    def instruction_tokens(self, instruction: np.ndarray) -> np.ndarray:
        """(C,) int32: token c = bin index of class c."""
        return np.asarray(instruction, np.int32).copy()
