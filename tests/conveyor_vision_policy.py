"""A tiny camera policy for the conveyor cell, for the camera driver's tests: a real ONNX
graph (onnx.helper, no torch) packaged with rtinfer's own packager, with the obs spec of
models/zoo/conveyor-vision (`overhead` uint8 [H, W, 3] from camera "overhead", `gantry`
float32 [8], `instruction` int32 [3]) and the cell's action spec.

Every waypoint of its chunk [1, 4, 4] is (gantry x, y, z, mean(overhead) * 0), clipped to the
action spec: the gantry holds where it is, and the graph reads every pixel of the frame.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OBS = {
    "format": "rtinfer-obs-spec",
    "version": 1,
    "normalisation": "in the graph",
    "inputs": [
        {
            "key": "overhead",
            "kind": "image",
            "dtype": "uint8",
            "shape": [128, 128, 3],
            "camera": "overhead",
        },
        {"key": "gantry", "dtype": "float32", "shape": [8]},
        {"key": "instruction", "dtype": "int32", "shape": [3]},
    ],
}


def build(out_dir, size: int = 128) -> Path:
    """Write the graph and package it into the model directory `out_dir`; returns it."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from examples.conveyor_sorting.config import CellConfig, action_spec
    from models.chunk_package import package_onnx
    from rtinfer.model.obs_spec import ObsSpec

    action = action_spec(CellConfig())
    obs = {**OBS, "inputs": [{**OBS["inputs"][0], "shape": [size, size, 3]}, *OBS["inputs"][1:]]}
    horizon, dim = action.horizon, len(action.names)
    consts = [
        h.make_tensor("flat", T.INT64, [2], [1, -1]),
        h.make_tensor("zero", T.FLOAT, [1], [0.0]),
        h.make_tensor("s0", T.INT64, [1], [0]),
        h.make_tensor("s3", T.INT64, [1], [3]),
        h.make_tensor("ax1", T.INT64, [1], [1]),
        h.make_tensor("low", T.FLOAT, [dim], list(map(float, action.low))),
        h.make_tensor("high", T.FLOAT, [dim], list(map(float, action.high))),
        h.make_tensor("chunk", T.INT64, [3], [1, horizon, dim]),
    ]
    nodes = [
        h.make_node("Cast", ["overhead"], ["img_f"], to=T.FLOAT),
        h.make_node("Reshape", ["img_f", "flat"], ["img_r"]),
        h.make_node("ReduceMean", ["img_r"], ["img_m"], axes=[1], keepdims=1),  # [1, 1]
        h.make_node("Mul", ["img_m", "zero"], ["suction"]),
        h.make_node("Slice", ["gantry", "s0", "s3", "ax1"], ["xyz"]),  # [1, 3]
        h.make_node("Concat", ["xyz", "suction"], ["wp"], axis=1),  # [1, 4]
        h.make_node("Max", ["wp", "low"], ["wp_lo"]),
        h.make_node("Min", ["wp_lo", "high"], ["wp_c"]),
        h.make_node("Unsqueeze", ["wp_c", "ax1"], ["wp_1"]),  # [1, 1, 4]
        h.make_node("Expand", ["wp_1", "chunk"], ["actions"]),
    ]
    graph = h.make_graph(
        nodes,
        "conveyor_vision_stub",
        [
            h.make_tensor_value_info("overhead", T.UINT8, [1, size, size, 3]),
            h.make_tensor_value_info("gantry", T.FLOAT, [1, 8]),
            h.make_tensor_value_info("instruction", T.INT32, [1, 3]),
        ],
        [h.make_tensor_value_info("actions", T.FLOAT, [1, horizon, dim])],
        consts,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    out = Path(out_dir)
    path = out.parent / f"{out.name}.onnx"
    onnx.save(model, path)
    package_onnx([path], out, action, obs=ObsSpec(obs))
    return out


def waypoint(gantry: np.ndarray) -> np.ndarray:
    """What the graph answers for this gantry vector (any frame)."""
    from examples.conveyor_sorting.config import CellConfig, action_spec

    a = action_spec(CellConfig())
    return np.clip(np.array([*gantry[:3], 0.0], np.float32), a.low, a.high)
