"""ObsSpec: the observation a continuous-chunk policy's graph takes, checked on every cycle.

    {"format": "rtinfer-obs-spec", "version": 1,
     "inputs": [{"key": "objects", "dtype": "float32", "shape": [6, 4]},
                {"key": "gantry", "dtype": "float32", "shape": [8]},
                {"key": "overhead", "kind": "image", "dtype": "uint8", "shape": [96, 96, 3],
                 "camera": "overhead"},
                {"key": "wrists", "kind": "image", "dtype": "uint8", "shape": [2, 64, 64, 3],
                 "camera": ["left", "right"]}],
     "normalisation": "in the graph"}

An input without `kind` (or `"kind": "array"`) is one array of the `obs` body's `values`
map (docs/wire.md), named by `key`, with exactly that dtype and shape. An image input
(`"kind": "image"`, dtype uint8) is the camera frame `frames[camera].image` of the body,
[H, W, C] as `shape` says; with a list of cameras it is their frames stacked, `shape` [N, H,
W, C] with N = len(camera), each frame [H, W, C] (stacked into a buffer allocated once: one
copy per frame; a single camera's frame is fed as it arrived, no copy). Either way the graph
takes the input of the same name, shape [1, *shape] (batch 1). Normalisation is the graph's
own (baked in at packaging): the node feeds the robot's raw values and pixels.

`feeds(body)` returns the graph's inputs (views where it can, nothing copied); a missing key,
another dtype or another shape raises ObsError (a WireError), whose message names the key,
what came and what the spec wants: the node counts it (obs_bad), logs it and answers
nothing. A frame's problem raises FrameError (an ObsError) whose `kind` names it for the
counters: frame_bad (dtype or shape), frame_missing (a camera the spec needs is not in the
body), frame_unknown (a camera the spec does not name: a miswired robot). Not thread-safe
(the stack buffers are the spec's own).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rtinfer.model.obs_tokens import ObsError
from rtinfer.transport.schema import SchemaError, check_name

FORMAT = "rtinfer-obs-spec"
DTYPES = (
    "float32",
    "float64",
    "float16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)
_ARRAY_KEYS, _IMAGE_KEYS = {"key", "dtype", "shape"}, {"key", "kind", "dtype", "shape", "camera"}
_UINT8 = np.dtype(np.uint8)
FRAME_COUNTERS = ("frame_bad", "frame_missing", "frame_unknown")  # FrameError's kinds


class FrameError(ObsError):
    """An observation's camera frames do not fit the spec; `kind` is the counter's name."""

    def __init__(self, kind: str, problem: str):
        super().__init__(problem)
        self.kind = kind


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
        self.images: dict[str, tuple[str, ...]] = {}  # image input key -> its camera(s)
        self._stacks: dict[str, np.ndarray] = {}  # stacked input key -> [1, N, H, W, C]
        for i, entry in enumerate(inputs):
            if not isinstance(entry, dict):
                raise ValueError(f'inputs[{i}] must be a map with "key", "dtype" and "shape"')
            kind = entry.get("kind", "array")
            if kind not in ("array", "image"):
                raise ValueError(f'inputs[{i}].kind {kind!r} must be "array" or "image"')
            want = _IMAGE_KEYS if kind == "image" else _ARRAY_KEYS
            if set(entry) - {"kind"} != want - {"kind"}:
                raise ValueError(f"inputs[{i}] ({kind}) must have exactly {sorted(want)}")
            key, dtype, shape = entry["key"], entry["dtype"], entry["shape"]
            if not isinstance(key, str) or not key or key in self.keys:
                raise ValueError(f"inputs[{i}].key {key!r} must be a new non-empty string")
            if dtype not in DTYPES:
                raise ValueError(f"inputs[{i}].dtype {dtype!r} is not one of {list(DTYPES)}")
            if not isinstance(shape, list) or not all(type(n) is int and n >= 1 for n in shape):
                raise ValueError(f"inputs[{i}].shape {shape!r} must be a list of ints >= 1")
            if kind == "image":
                self.images[key] = self._cameras(i, entry)
            self.keys.append(key)
            self.dtypes.append(np.dtype(dtype))
            self.shapes.append(tuple(shape))
            if kind == "image" and isinstance(entry["camera"], list):
                self._stacks[key] = np.zeros((1, *shape), np.uint8)
        self.cameras = {c for cams in self.images.values() for c in cams}

    def _cameras(self, i: int, entry: dict) -> tuple[str, ...]:
        """An image input's camera names, checked with its dtype and shape."""
        camera, shape = entry["camera"], entry["shape"]
        cams = camera if isinstance(camera, list) else [camera]
        if entry["dtype"] != "uint8":
            raise ValueError(
                f'inputs[{i}].dtype must be "uint8" for an image (got '
                f"{entry['dtype']!r}): feed the raw pixels, normalise in the graph"
            )
        for c in cams:
            try:
                check_name(c)
            except SchemaError as e:
                raise ValueError(f"inputs[{i}].camera: {e}") from None
        taken = {c for named in self.images.values() for c in named}
        if not cams or len(set(cams)) != len(cams) or taken & set(cams):
            raise ValueError(
                f"inputs[{i}].camera {camera!r}: name each camera once, in one input only"
            )
        dims = 3 if isinstance(camera, str) else 4
        if len(shape) != dims or (dims == 4 and shape[0] != len(cams)):
            raise ValueError(
                f"inputs[{i}].shape {shape} must be [H, W, C] for one camera, "
                f"[N, H, W, C] with N = len(camera) for a stack"
            )
        return tuple(cams)

    def image_hints(self) -> list[str]:
        """One line per plain-array input that looks like a camera image (uint8 [H, W, C],
        C in 1, 3, 4, H and W at least 16): fed from `values`, a robot's camera frames never
        reach it. Advice only: such an input may be meant as an array."""
        out = []
        for key, dtype, shape in zip(self.keys, self.dtypes, self.shapes):
            if (
                key in self.images
                or dtype != _UINT8
                or len(shape) != 3
                or shape[2] not in (1, 3, 4)
                or min(shape[:2]) < 16
            ):
                continue
            out.append(
                f"input {key!r} is uint8 {list(shape)}, which looks like a camera image, "
                f"and is packaged as a plain array (fed from values[{key!r}], not from a "
                f"camera's frames): if it is an image, package with --obs-spec naming it "
                f'{{"key": "{key}", "kind": "image", "dtype": "uint8", "shape": '
                f'{list(shape)}, "camera": NAME}} (docs/policies.md section 10)'
            )
        return out

    @classmethod
    def load(cls, path: str | Path) -> ObsSpec:
        return cls(json.loads(Path(path).read_text()))

    def graph_inputs(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """{key: (dtype name, [1, *shape])}: what the graph must declare."""
        return {k: (d.name, (1, *s)) for k, d, s in zip(self.keys, self.dtypes, self.shapes)}

    def feeds(self, body: dict) -> dict[str, np.ndarray]:
        """The graph's inputs from an `obs` body, as batch-1 views (a stack: the spec's own
        buffer, valid until the next call); ObsError if it does not match the spec."""
        values = body.get("values")
        if not isinstance(values, dict):
            raise ObsError("obs body has no values map")
        frames = body.get("frames") or {}
        if self.images or frames:
            self._check_cameras(frames)
        out = {}
        for key, dtype, shape in zip(self.keys, self.dtypes, self.shapes):
            cams = self.images.get(key)
            if cams is not None:
                out[key] = self._image(key, cams, shape, frames)
                continue
            arr = values.get(key)
            if arr is None:
                raise ObsError(
                    f"obs lacks values[{key!r}] ({dtype.name} {list(shape)}), which "
                    f"the model's obs_spec.json needs; has {sorted(values)}"
                )
            if arr.dtype != dtype or arr.shape != shape:
                raise ObsError(
                    f"obs values[{key!r}] is {arr.dtype} {list(arr.shape)}; the "
                    f"model's obs_spec.json wants {dtype.name} {list(shape)}"
                )
            out[key] = arr[None]
        return out

    def _check_cameras(self, frames: dict) -> None:
        unknown = sorted(set(frames) - self.cameras)
        if unknown:
            raise FrameError(
                "frame_unknown",
                f"obs carries frames of camera(s) {unknown[:4]}, "
                f"which the model's obs_spec.json does not name (it takes "
                f"{sorted(self.cameras)}): connect the cameras the policy was "
                f"trained on, by those names",
            )
        missing = sorted(self.cameras - set(frames))
        if missing:
            raise FrameError(
                "frame_missing",
                f"obs lacks the frame of camera(s) {missing[:4]}, "
                f"which the model's obs_spec.json needs; has {sorted(frames)}",
            )

    def _image(self, key: str, cams: tuple[str, ...], shape: tuple, frames: dict) -> np.ndarray:
        one = shape[-3:]
        stack = self._stacks.get(key)
        for n, cam in enumerate(cams):
            image = frames[cam].get("image") if isinstance(frames[cam], dict) else None
            dtype, got = getattr(image, "dtype", None), getattr(image, "shape", None)
            if image is None or dtype != _UINT8 or got != one:
                raise FrameError(
                    "frame_bad",
                    f"obs frame of camera {cam!r} is {dtype} "
                    f"{list(got) if got is not None else got}; the model's "
                    f"obs_spec.json input {key!r} wants uint8 {list(one)} (H, W, C)",
                )
            if stack is None:
                return image[None]
            stack[0, n] = image
        assert stack is not None  # an image input names at least one camera (checked at load)
        return stack
