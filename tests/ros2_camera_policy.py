"""A tiny camera policy for the ROS 2 arm (four joints), for the bridge's camera test: built
with onnx.helper (no torch) and packaged with rtinfer's own packager.

Inputs: `wrist` uint8 [8, 8, 3] (camera "wrist") and `joints` float32 [8] (the bridge's
default observation: positions then velocities). Every waypoint of its chunk [1, 10, 4] is the
rest pose (0, 0.3, 1.6, 1.0) with the base at mean(red channel) / 255 rad: where the arm's
base goes shows what the graph was fed, and that red is red (a bgr8 camera turned to RGB).
"""

from __future__ import annotations

import numpy as np

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.obs_spec import ObsSpec

REST = (0.0, 0.3, 1.6, 1.0)
ACTION = ActionSpec(
    ("base", "shoulder", "elbow", "wrist"),
    ("rad",) * 4,
    (-2.0, -0.6, -0.3, -2.0),
    (2.0, 2.0, 2.6, 2.0),
    horizon=10,
    period_ns=50_000_000,
    start_ns=50_000_000,
)
OBS = {
    "format": "rtinfer-obs-spec",
    "version": 1,
    "normalisation": "in the graph",
    "inputs": [
        {"key": "wrist", "kind": "image", "dtype": "uint8", "shape": [8, 8, 3], "camera": "wrist"},
        {"key": "joints", "dtype": "float32", "shape": [8]},
    ],
}


def base_rad(red: int) -> float:
    """Where the policy sends the base for a frame whose red channel is `red` throughout."""
    return red / 255


def build(out_dir) -> None:
    """Write the graph and package it into the model directory `out_dir`."""
    from onnx import TensorProto as T
    from onnx import helper as h

    from tests.camera_policy import package_graph

    column0 = np.zeros((1, 10, 4), np.float32)
    column0[..., 0] = 1.0
    rest = np.tile(np.array(REST, np.float32), (1, 10, 1))
    consts = [
        h.make_tensor("flat", T.INT64, [2], [1, -1]),
        h.make_tensor("one3", T.INT64, [3], [1, 1, 1]),
        h.make_tensor("red", T.INT64, [1], [0]),
        h.make_tensor("inv255", T.FLOAT, [1], [1 / 255]),
        h.make_tensor("zero", T.FLOAT, [1], [0.0]),
        h.make_tensor("column0", T.FLOAT, [1, 10, 4], column0.ravel().tolist()),
        h.make_tensor("rest", T.FLOAT, [1, 10, 4], rest.ravel().tolist()),
    ]
    nodes = [
        h.make_node("Cast", ["wrist"], ["wrist_f"], to=T.FLOAT),
        h.make_node("Gather", ["wrist_f", "red"], ["red_f"], axis=3),
        h.make_node("Reshape", ["red_f", "flat"], ["red_r"]),
        h.make_node("ReduceMean", ["red_r"], ["red_m"], axes=[1], keepdims=1),
        h.make_node("Mul", ["red_m", "inv255"], ["base"]),
        # the joints are fed (the spec names them) and weigh nothing
        h.make_node("ReduceMean", ["joints"], ["joints_m"], axes=[1], keepdims=1),
        h.make_node("Mul", ["joints_m", "zero"], ["joints_0"]),
        h.make_node("Add", ["base", "joints_0"], ["base_j"]),
        h.make_node("Reshape", ["base_j", "one3"], ["base_3"]),
        h.make_node("Mul", ["base_3", "column0"], ["offset"]),
        h.make_node("Add", ["offset", "rest"], ["actions"]),
    ]
    graph = h.make_graph(
        nodes,
        "ros2_camera_policy",
        [
            h.make_tensor_value_info("wrist", T.UINT8, [1, 8, 8, 3]),
            h.make_tensor_value_info("joints", T.FLOAT, [1, 8]),
        ],
        [h.make_tensor_value_info("actions", T.FLOAT, [1, 10, 4])],
        consts,
    )
    package_graph(graph, out_dir, ACTION, ObsSpec(OBS))
