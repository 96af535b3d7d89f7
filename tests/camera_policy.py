"""A tiny continuous-chunk policy with image inputs, for the camera tests: built with
onnx.helper (no torch) and packaged with rtinfer's own packager.

Inputs: `overhead` uint8 [8, 8, 3] (camera "overhead"), `wrists` uint8 [2, 4, 4, 1] (a stack
of cameras "left", "right") and `gantry` float32 [2]. Every waypoint of its chunk [1, 2, 3] is
(mean(overhead) / 255, mean(wrists) / 255, gantry[0]): what the graph was fed can be read
off the chunk.
"""

from __future__ import annotations

import numpy as np

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.obs_spec import ObsSpec

ACTION = ActionSpec(
    ("a", "b", "c"),
    ("1", "1", "1"),
    (0.0, 0.0, -1.0),
    (1.0, 1.0, 1.0),
    horizon=2,
    period_ns=50_000_000,
    start_ns=50_000_000,
)
OBS = {
    "format": "rtinfer-obs-spec",
    "version": 1,
    "normalisation": "in the graph",
    "inputs": [
        {
            "key": "overhead",
            "kind": "image",
            "dtype": "uint8",
            "shape": [8, 8, 3],
            "camera": "overhead",
        },
        {
            "key": "wrists",
            "kind": "image",
            "dtype": "uint8",
            "shape": [2, 4, 4, 1],
            "camera": ["left", "right"],
        },
        {"key": "gantry", "dtype": "float32", "shape": [2]},
    ],
}


def expected(overhead: np.ndarray, left: np.ndarray, right: np.ndarray, gantry) -> np.ndarray:
    """The waypoint the graph computes from these inputs."""
    wrists = np.concatenate([left.ravel(), right.ravel()]).astype(np.float64)
    return np.array([overhead.mean() / 255, wrists.mean() / 255, gantry[0]], np.float32)


def build(out_dir) -> None:
    """Write the graph and package it into the model directory `out_dir`."""
    from onnx import TensorProto as T
    from onnx import helper as h

    def mean(name: str) -> list:  # uint8 [1, ...] -> float [1, 1, 1]: its mean / 255
        return [
            h.make_node("Cast", [name], [f"{name}_f"], to=T.FLOAT),
            h.make_node("Reshape", [f"{name}_f", "flat"], [f"{name}_r"]),
            h.make_node("ReduceMean", [f"{name}_r"], [f"{name}_m"], axes=[1], keepdims=1),
            h.make_node("Mul", [f"{name}_m", "inv255"], [f"{name}_s"]),
            h.make_node("Reshape", [f"{name}_s", "one3"], [f"{name}_3"]),
        ]

    cols = np.eye(3, dtype=np.float32)
    consts = [
        h.make_tensor("flat", T.INT64, [2], [1, -1]),
        h.make_tensor("one3", T.INT64, [3], [1, 1, 1]),
        h.make_tensor("inv255", T.FLOAT, [1], [1 / 255]),
        h.make_tensor("gidx", T.INT64, [1], [0]),
    ]
    for i, c in enumerate("abc"):
        consts.append(
            h.make_tensor(
                f"col_{c}", T.FLOAT, [1, 2, 3], np.tile(cols[i], (1, 2, 1)).ravel().tolist()
            )
        )
    nodes = [
        *mean("overhead"),
        *mean("wrists"),
        h.make_node("Gather", ["gantry", "gidx"], ["g0"], axis=1),  # [1, 1]
        h.make_node("Reshape", ["g0", "one3"], ["g3"]),
        h.make_node("Mul", ["overhead_3", "col_a"], ["pa"]),
        h.make_node("Mul", ["wrists_3", "col_b"], ["pb"]),
        h.make_node("Mul", ["g3", "col_c"], ["pc"]),
        h.make_node("Add", ["pa", "pb"], ["pab"]),
        h.make_node("Add", ["pab", "pc"], ["actions"]),
    ]
    graph = h.make_graph(
        nodes,
        "camera_policy",
        [
            h.make_tensor_value_info("overhead", T.UINT8, [1, 8, 8, 3]),
            h.make_tensor_value_info("wrists", T.UINT8, [1, 2, 4, 4, 1]),
            h.make_tensor_value_info("gantry", T.FLOAT, [1, 2]),
        ],
        [h.make_tensor_value_info("actions", T.FLOAT, [1, 2, 3])],
        consts,
    )
    package_graph(graph, out_dir, ACTION, ObsSpec(OBS))


def package_graph(graph, out_dir, action: ActionSpec, obs: ObsSpec) -> None:
    """An onnx GraphProto, checked, saved beside `out_dir` and packaged into it."""
    from pathlib import Path

    import onnx
    from onnx import helper as h

    from models.chunk_package import package_onnx

    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(out_dir).parent / f"{Path(out_dir).name}.onnx"
    onnx.save(model, path)
    package_onnx([path], out_dir, action, obs=obs)
