"""ObsSpec: the observation a continuous-chunk policy's graph takes, checked on every cycle.

    {"format": "rtinfer-obs-spec", "version": 1,
     "inputs": [{"key": "objects", "dtype": "float32", "shape": [6, 4]},
                {"key": "gantry", "dtype": "float32", "shape": [8]},
                {"key": "instruction", "dtype": "int32", "shape": [3]}],
     "normalisation": "in the graph"}

Each input is one array of the `obs` body's `values` map (docs/wire.md), named by `key`,
with exactly that dtype and shape; the graph takes it as the input of the same name, shape
[1, *shape] (batch 1). Normalisation is the graph's own (baked in at packaging): the node
feeds the robot's raw values. `feeds(body)` returns the graph's inputs as views (nothing
copied); a missing key, another dtype or another shape raises ObsError (a WireError), whose
message names the key, what came and what the spec wants: the node counts it (obs_bad),
logs it and answers nothing.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rtinfer.model.obs_tokens import ObsError

FORMAT = "rtinfer-obs-spec"
DTYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64", "bool")


class ObsSpec:
    def __init__(self, doc: dict):
        if doc.get("format") != FORMAT or doc.get("version") != 1:
            raise ValueError(f"not an {FORMAT} version 1 document")
        inputs = doc.get("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise ValueError('"inputs" must be a non-empty list of {"key", "dtype", "shape"}')
        self.doc = doc
        self.keys: list[str] = []
        self.dtypes: list[np.dtype] = []
        self.shapes: list[tuple[int, ...]] = []
        for i, entry in enumerate(inputs):
            if not isinstance(entry, dict) or set(entry) != {"key", "dtype", "shape"}:
                raise ValueError(f'inputs[{i}] must have exactly "key", "dtype" and "shape"')
            key, dtype, shape = entry["key"], entry["dtype"], entry["shape"]
            if not isinstance(key, str) or not key or key in self.keys:
                raise ValueError(f"inputs[{i}].key {key!r} must be a new non-empty string")
            if dtype not in DTYPES:
                raise ValueError(f"inputs[{i}].dtype {dtype!r} is not one of {list(DTYPES)}")
            if not isinstance(shape, list) or not all(type(n) is int and n >= 1 for n in shape):
                raise ValueError(f"inputs[{i}].shape {shape!r} must be a list of ints >= 1")
            self.keys.append(key)
            self.dtypes.append(np.dtype(dtype))
            self.shapes.append(tuple(shape))

    @classmethod
    def load(cls, path: str | Path) -> "ObsSpec":
        return cls(json.loads(Path(path).read_text()))

    def graph_inputs(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """{key: (dtype name, [1, *shape])}: what the graph must declare."""
        return {k: (d.name, (1, *s)) for k, d, s in zip(self.keys, self.dtypes, self.shapes)}

    def feeds(self, body: dict) -> dict[str, np.ndarray]:
        """The graph's inputs from an `obs` body, as batch-1 views; ObsError if it does not
        match the spec."""
        values = body.get("values")
        if not isinstance(values, dict):
            raise ObsError("obs body has no values map")
        out = {}
        for key, dtype, shape in zip(self.keys, self.dtypes, self.shapes):
            arr = values.get(key)
            if arr is None:
                raise ObsError(f"obs lacks values[{key!r}] ({dtype.name} {list(shape)}), which "
                               f"the model's obs_spec.json needs; has {sorted(values)}")
            if arr.dtype != dtype or arr.shape != shape:
                raise ObsError(f"obs values[{key!r}] is {arr.dtype} {list(arr.shape)}; the "
                               f"model's obs_spec.json wants {dtype.name} {list(shape)}")
            out[key] = arr[None]
        return out
