"""A tiny camera policy for the C++ example controller's camera (clients/cpp/examples/camera.hpp):
built with onnx.helper (no torch) and packaged with rtinfer's own packager
(camera_policy.package_graph).

Inputs: what the controller sends with --obs-hz and --camera overhead --frame-hw H,W:
`overhead` uint8 [H, W, 3] (camera "overhead") and `pos` float32 [4] (its axes). Outputs a
continuous chunk on the controller's axes (conveyor-v1's tokenizer names and horizon), every
waypoint (mean(overhead) / 255, overhead[1, 2, 0] / 255, pos[0], 0): what the graph was fed,
the pixels' layout included, can be read off the chunk.
"""

from __future__ import annotations

import numpy as np

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.obs_spec import ObsSpec

ACTION = ActionSpec(
    ("x", "y", "z", "suction"),
    ("m", "m", "m", "1"),
    (-1.0, -1.0, -1.0, -1.0),
    (1.0, 1.0, 1.0, 1.0),
    horizon=4,
    period_ns=50_000_000,
    start_ns=50_000_000,
)


def obs_spec(height: int, width: int) -> dict:
    return {
        "format": "rtinfer-obs-spec",
        "version": 1,
        "normalisation": "in the graph",
        "inputs": [
            {
                "key": "overhead",
                "kind": "image",
                "dtype": "uint8",
                "shape": [height, width, 3],
                "camera": "overhead",
            },
            {"key": "pos", "dtype": "float32", "shape": [4]},
        ],
    }


def synthetic_frame(height: int, width: int) -> np.ndarray:
    """The C++ example's synthetic frame: byte i of the image is i mod 256."""
    return (np.arange(height * width * 3) % 256).astype(np.uint8).reshape(height, width, 3)


def expected(image: np.ndarray) -> np.ndarray:
    """The first two values of every waypoint, for this image."""
    return np.array([image.mean() / 255, image[1, 2, 0] / 255], np.float32)


def build(out_dir, height: int, width: int) -> None:
    """Write the graph and package it into the model directory `out_dir`."""
    from camera_policy import package_graph
    from onnx import TensorProto as T
    from onnx import helper as h

    consts = [
        h.make_tensor("flat", T.INT64, [2], [1, -1]),
        h.make_tensor("pixel", T.INT64, [1], [(1 * width + 2) * 3]),  # [1, 2, 0], C order
        h.make_tensor("first", T.INT64, [1], [0]),
        h.make_tensor("inv255", T.FLOAT, [1], [1 / 255]),
        h.make_tensor("zero", T.FLOAT, [1, 1], [0.0]),
        h.make_tensor("chunk", T.INT64, [3], [1, 4, 4]),
        h.make_tensor("row", T.INT64, [3], [1, 1, 4]),
    ]
    nodes = [
        h.make_node("Cast", ["overhead"], ["img_f"], to=T.FLOAT),
        h.make_node("Reshape", ["img_f", "flat"], ["img_r"]),  # [1, H * W * 3]
        h.make_node("ReduceMean", ["img_r"], ["img_m"], axes=[1], keepdims=1),
        h.make_node("Gather", ["img_r", "pixel"], ["img_p"], axis=1),
        h.make_node("Gather", ["pos", "first"], ["pos0"], axis=1),
        h.make_node("Mul", ["img_m", "inv255"], ["mean"]),
        h.make_node("Mul", ["img_p", "inv255"], ["px"]),
        h.make_node("Concat", ["mean", "px", "pos0", "zero"], ["wp"], axis=1),  # [1, 4]
        h.make_node("Reshape", ["wp", "row"], ["wp3"]),
        h.make_node("Expand", ["wp3", "chunk"], ["actions"]),
    ]
    graph = h.make_graph(
        nodes,
        "cpp_camera_policy",
        [
            h.make_tensor_value_info("overhead", T.UINT8, [1, height, width, 3]),
            h.make_tensor_value_info("pos", T.FLOAT, [1, 4]),
        ],
        [h.make_tensor_value_info("actions", T.FLOAT, [1, 4, 4])],
        consts,
    )
    package_graph(graph, out_dir, ACTION, ObsSpec(obs_spec(height, width)))
