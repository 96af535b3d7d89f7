"""Generic observation tokenizer: an `obs` wire body -> observation + instruction tokens.

The spec ships with the model as `obs_tokens.json`, so the inference node tokenizes
exactly as training did without importing any cell code. Every token is a raw bin id in
[0, bins) (field identity comes from its position in the sequence). Spec:

    {"format": "rtinfer-obs-tokens", "version": 1, "bins": 256,
     "fields": [                                       # in sequence order
       {"key": "gantry", "slice": [0, 6], "kind": "uniform", "low": [..], "high": [..]},
       {"key": "gantry", "slice": [6, 8], "kind": "threshold", "at": 0.5},
       {"key": "mode", "kind": "categorical", "classes": 4},
       {"key": "objects", "kind": "table", "rows": 6, "valid": {"column": 3, "above": 0.5},
        "columns": [{"column": 0, "kind": "categorical", "classes": 3},
                    {"column": 1, "kind": "uniform", "low": -0.7, "high": 0.6}]}],
     "instruction": {"key": "instruction", "from": "values", "length": 3, "classes": 3}}

- uniform: per element of the flattened (sliced) array, floor((x - low) / (high - low) * bins)
  in float64, clipped to [0, bins). low/high: one value or one per element.
- threshold: 1 if x > at else 0.  categorical: int(x) (truncated); negative or >= classes
  -> EMPTY = classes.
- table: a (K, C) array, row-major over `rows` slots, one token per listed column. Rows that
  are missing or fail `valid` give EMPTY for categorical columns and 0 for the others.
- instruction: `from` "values" (an int array of `length` ids) or "ints" (one id); ids in
  [0, classes).
Malformed bodies (missing key, short array, NaN) raise ObsError, a WireError: the node
counts and drops them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rtinfer.transport.wire import WireError

FORMAT = "rtinfer-obs-tokens"


class ObsError(WireError):
    """An observation body that the model's spec cannot tokenize."""


def _uniform(x64: np.ndarray, low, high, bins: int) -> np.ndarray:
    # Same float64 operation order as the training tokenizers, so bins match bit for bit.
    t = np.floor((x64 - low) / (high - low) * bins)
    return np.clip(t, 0, bins - 1).astype(np.int64)


def _categorical(x: np.ndarray, classes: int) -> np.ndarray:
    c = x.astype(np.int64)
    return np.where((c < 0) | (c >= classes), classes, c)


class _Field:
    """One spec entry, compiled: `.length` tokens written by `.encode(values, out)`."""

    def __init__(self, spec: dict, bins: int):
        self.key, self.kind, self.bins = spec["key"], spec["kind"], bins
        if self.kind == "table":
            self.rows = int(spec["rows"])
            self.valid = spec.get("valid")
            self.cols = [_Field({**c, "key": self.key}, bins) for c in spec["columns"]]
            self.col_idx = [int(c["column"]) for c in spec["columns"]]
            self.length = self.rows * len(self.cols)
            return
        self.slice = tuple(spec["slice"]) if "slice" in spec else None
        self.classes = int(spec.get("classes", 0))
        self.at = float(spec.get("at", 0.5))
        self.low = np.asarray(spec.get("low", 0.0), np.float64)
        self.high = np.asarray(spec.get("high", 1.0), np.float64)
        if self.kind == "uniform" and not (self.high > self.low).all():
            raise ValueError(f"field {self.key}: need high > low")
        if self.kind == "categorical" and not 0 < self.classes < bins:
            raise ValueError(f"field {self.key}: need 0 < classes < bins (EMPTY = classes)")
        if self.kind not in ("uniform", "threshold", "categorical"):
            raise ValueError(f"field {self.key}: unknown kind {self.kind!r}")
        n = self.slice[1] - self.slice[0] if self.slice else int(spec.get("size", 1))
        self.length = n

    def tokens(self, x: np.ndarray) -> np.ndarray:
        """Tokens for a flat float array of this field's elements."""
        if self.kind == "uniform":
            return _uniform(x.astype(np.float64), self.low, self.high, self.bins)
        if self.kind == "threshold":
            return (x > self.at).astype(np.int64)
        return _categorical(x, self.classes)

    def encode(self, values: dict, out: np.ndarray) -> None:
        a = values.get(self.key)
        if not isinstance(a, np.ndarray):
            raise ObsError(f"obs body has no array values[{self.key!r}]")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ObsError(f"values[{self.key!r}] holds NaN or inf")
        if self.kind == "table":
            return self._encode_table(a, out)
        flat = a.reshape(-1)
        x = flat[self.slice[0] : self.slice[1]] if self.slice else flat
        if x.size != self.length:
            raise ObsError(
                f"values[{self.key!r}] gives {x.size} elements, spec needs {self.length}"
            )
        out[:] = self.tokens(x)

    def _encode_table(self, a: np.ndarray, out: np.ndarray) -> None:
        widest = max(self.col_idx + [self.valid["column"] if self.valid else 0])
        if a.ndim != 2 or a.shape[1] <= widest:
            raise ObsError(
                f"values[{self.key!r}] has shape {a.shape}, spec needs (K, >"
                f"{max(self.col_idx)}) rows x columns"
            )
        k = min(self.rows, a.shape[0])
        ok = np.zeros(self.rows, bool)
        ok[:k] = a[:k, self.valid["column"]] > self.valid["above"] if self.valid else True
        grid = out.reshape(self.rows, len(self.cols))
        for j, (col, c) in enumerate(zip(self.cols, self.col_idx)):
            fill = col.classes if col.kind == "categorical" else 0
            grid[:, j] = fill
            grid[:k, j] = np.where(ok[:k], col.tokens(a[:k, c]), fill)


class ObsTokens:
    """Compiled spec. `.encode(body) -> (instr (C,), obs (L,))` int64 raw ids. Stateless
    apart from construction; thread-safe. Allocates small arrays (policy rate, not 1 kHz)."""

    def __init__(self, spec: dict):
        if spec.get("format", FORMAT) != FORMAT or int(spec.get("version", 1)) > 1:
            raise ValueError(f"not a {FORMAT} v1 spec")
        self.spec = spec
        self.bins = int(spec["bins"])
        self.fields = [_Field(f, self.bins) for f in spec["fields"]]
        self.length = sum(f.length for f in self.fields)
        ins = spec["instruction"]
        self.instr_key, self.instr_from = ins["key"], ins.get("from", "values")
        self.instr_classes = int(ins["classes"])
        self.instr_length = int(ins.get("length", 1))
        if self.instr_from == "ints" and self.instr_length != 1:
            raise ValueError("an instruction from 'ints' is one token (length 1)")

    @classmethod
    def load(cls, path) -> ObsTokens:
        return cls(json.loads(Path(path).read_text()))

    def encode(self, body: dict) -> tuple[np.ndarray, np.ndarray]:
        values, ints = body.get("values"), body.get("ints")
        if not isinstance(values, dict) or not isinstance(ints, dict):
            raise ObsError("obs body needs 'values' and 'ints' maps")
        return self.instruction(values, ints), self.observation(values)

    def observation(self, values: dict) -> np.ndarray:
        """(L,) int64 observation tokens of a body's `values` map (the cell's training-side
        tokenizer is this too). Raises ObsError as `encode` does."""
        obs, at = np.empty(self.length, np.int64), 0
        for f in self.fields:
            f.encode(values, obs[at : at + f.length])
            at += f.length
        return obs

    def instruction(self, values: dict, ints: dict) -> np.ndarray:
        src = values if self.instr_from == "values" else ints
        if self.instr_key not in src:
            raise ObsError(f"obs body has no {self.instr_from}[{self.instr_key!r}] instruction")
        ids = np.asarray(src[self.instr_key]).reshape(-1)
        if (
            ids.size != self.instr_length
            or ids.dtype.kind not in "iu"
            and not (
                ids.dtype.kind == "f" and np.isfinite(ids).all() and (ids == np.round(ids)).all()
            )
        ):
            raise ObsError(f"instruction must be {self.instr_length} integer ids, got {ids!r}")
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.instr_classes):
            raise ObsError(f"instruction ids outside [0, {self.instr_classes}): {ids.tolist()}")
        return ids
