"""rtinfer eval's conveyor env renders the camera a policy reads (evaluate.camera_config).

A continuous-chunk policy with an image input (uint8 [32, 32, 3] from camera "overhead")
is evaluated in lockstep: the node's ObsSpec.feeds refuses a frame of another size or a
missing camera, so the episode running at all shows the env rendered that camera at the
spec's size. The policy holds the cup where it is (its chunk is the gantry's x, y, z and
suction), so the one object passes by and is missed.
"""

from __future__ import annotations

import pytest

# examples.conveyor_sorting selects MuJoCo's EGL backend: import it before mujoco loads.
from examples.conveyor_sorting.config import CellConfig, EnvConfig, action_spec

pytest.importorskip("onnxruntime")
pytest.importorskip("mujoco")


from examples.conveyor_sorting.evaluate import camera_config, evaluate  # noqa: E402
from rtinfer.model.chunk_model import load_model  # noqa: E402


def _camera_obs(cameras: dict[str, list[int]]) -> dict:
    return {
        "format": "rtinfer-obs-spec",
        "version": 1,
        "normalisation": "in the graph",
        "inputs": [
            *(
                {"key": c, "kind": "image", "dtype": "uint8", "shape": s, "camera": c}
                for c, s in cameras.items()
            ),
            {"key": "gantry", "dtype": "float32", "shape": [8]},
        ],
    }


def _hold_policy(out_dir, cameras: dict[str, list[int]]):
    """actions [1, 4, 4] = gantry[:4] at every waypoint; the image inputs are declared and
    read (their mean, times zero, is added) so the graph takes them."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from models.chunk_package import package_onnx
    from rtinfer.model.obs_spec import ObsSpec

    nodes = [
        h.make_node("Slice", ["gantry", "s0", "s4", "ax1"], ["g4"]),
        h.make_node("Reshape", ["g4", "shape"], ["g"]),
        h.make_node("Expand", ["g", "chunk"], ["held"]),
    ]
    last = "held"
    for c in cameras:
        nodes += [
            h.make_node("Cast", [c], [f"{c}_f"], to=T.FLOAT),
            h.make_node("ReduceMean", [f"{c}_f"], [f"{c}_m"], keepdims=0),
            h.make_node("Mul", [f"{c}_m", "zero"], [f"{c}_0"]),
            h.make_node("Add", [last, f"{c}_0"], [f"{last}_{c}"]),
        ]
        last = f"{last}_{c}"
    nodes.append(h.make_node("Identity", [last], ["actions"]))
    consts = [
        h.make_tensor("s0", T.INT64, [1], [0]),
        h.make_tensor("s4", T.INT64, [1], [4]),
        h.make_tensor("ax1", T.INT64, [1], [1]),
        h.make_tensor("shape", T.INT64, [3], [1, 1, 4]),
        h.make_tensor("chunk", T.INT64, [3], [1, 4, 4]),
        h.make_tensor("zero", T.FLOAT, [], [0.0]),
    ]
    inputs = [h.make_tensor_value_info(c, T.UINT8, [1, *s]) for c, s in cameras.items()]
    graph = h.make_graph(
        nodes,
        "hold",
        [*inputs, h.make_tensor_value_info("gantry", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("actions", T.FLOAT, [1, 4, 4])],
        consts,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = out_dir.parent / f"{out_dir.name}.onnx"
    onnx.save(model, path)
    package_onnx([path], out_dir, action_spec(CellConfig()), obs=ObsSpec(_camera_obs(cameras)))
    return out_dir


def test_eval_renders_the_camera_the_policy_reads_at_its_size(tmp_path):
    model = _hold_policy(tmp_path / "cam", {"overhead": [32, 32, 3]})
    cfg = camera_config(EnvConfig(), load_model(model))
    assert (cfg.camera, cfg.frame_hw) == ("overhead", (32, 32))
    r = evaluate(str(model), episodes=1, per_episode=1, instructions=["0,1,2"])
    assert r["spawned"] == 1 and r["per_instruction"]["0,1,2"]["spawned"] == 1
    assert r["missed"] == 1 and r["correct"] == 0  # a held cup sorts nothing


def test_a_vectors_only_policy_gets_no_camera():
    cfg = camera_config(EnvConfig(), load_model("models/zoo/conveyor-act"))
    assert cfg == EnvConfig() and cfg.camera is None


def test_a_policy_reading_two_cameras_is_refused_in_one_line(tmp_path):
    model = _hold_policy(tmp_path / "two", {"overhead": [32, 32, 3], "wrist": [16, 16, 3]})
    with pytest.raises(
        ValueError,
        match=r"reads cameras \['overhead', 'wrist'\]; the conveyor "
        r"cell renders one",
    ) as e:
        camera_config(EnvConfig(), load_model(model))
    assert "\n" not in str(e.value)
