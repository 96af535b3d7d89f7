"""examples/conveyor_sorting/lerobot_act.py: LeRobot ACTPolicy, state only -> one ONNX graph with the fixed contract;
lerobot_act_vision.py: the same with the overhead camera through its ResNet-18 backbone.

Runs where lerobot is installed (the LeRobot venv: `make lerobot-env`, then
`.venv-lerobot/bin/python -m pytest tests/test_lerobot_act.py`); skips elsewhere.
Trains a tiny ACT for a few steps on a synthetic dataset shaped like the collector's, exports
it, and checks the graph's I/O names, shapes and dtypes and ONNX Runtime vs torch parity.
The camera variant trains two steps on one short recorded episode (real frames), packages
it, checks parity and the node's runner, and runs it in the camera env as rtinfer eval does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("onnxruntime")

# examples.conveyor_sorting selects MuJoCo's EGL backend (the camera test renders): import it
# before mujoco loads.
from examples.conveyor_sorting import lerobot_act as la  # noqa: E402

pytest.importorskip("mujoco")

TINY = [
    "--dim-model",
    "32",
    "--n-heads",
    "2",
    "--dim-feedforward",
    "64",
    "--n-encoder-layers",
    "1",
    "--n-decoder-layers",
    "1",
]


def _synthetic(path, n=96, seed=0):
    """Rows shaped like examples.conveyor_sorting.collect's output (raw arrays only)."""
    rng = np.random.default_rng(seed)
    k = la.visible_k()
    objects = np.zeros((n, k, 4), np.float32)
    for i in range(n):
        m = int(rng.integers(0, k + 1))
        objects[i, :m, 0] = rng.integers(0, 3, m)
        objects[i, :m, 1] = rng.uniform(-0.6, 0.5, m)
        objects[i, :m, 2] = rng.uniform(-0.15, 0.15, m)
        objects[i, :m, 3] = 1.0
    gantry = np.zeros((n, 8), np.float32)
    gantry[:, :3] = rng.uniform([-0.5, -0.2, 0.3], [0.5, 0.5, 0.6], (n, 3))
    gantry[:, 3:6] = rng.normal(0, 0.3, (n, 3))
    gantry[:, 6:] = rng.integers(0, 2, (n, 2))
    held = rng.integers(-1, 3, (n, 1)).astype(np.float32)
    instr = np.stack([rng.permutation(3) for _ in range(n)]).astype(np.int32)
    actions = np.repeat(gantry[:, None, :4], 4, axis=1) + rng.normal(0, 0.01, (n, 4, 4))
    actions[..., 3] = rng.integers(0, 2, (n, 4))
    np.savez_compressed(
        path,
        objects=objects,
        gantry=gantry,
        held=held,
        instruction_tokens=instr,
        action_values=actions.astype(np.float32),
    )
    return path


def test_train_export_contract_and_parity(tmp_path):
    data = str(_synthetic(tmp_path / "demo.npz"))
    ckpt = tmp_path / "ckpt"
    assert (
        la.main(
            [
                "train",
                "--data",
                data,
                "--relabel",
                data,
                "--out",
                str(ckpt),
                "--steps",
                "5",
                "--batch",
                "16",
                "--log-every",
                "5",
                *TINY,
            ]
        )
        == 0
    )
    meta = json.loads((ckpt / "act.json").read_text())
    assert meta["implementation"] == "lerobot.policies.act.modeling_act.ACTPolicy"
    assert meta["config"]["chunk_size"] == 4 and meta["config"]["use_vae"] is False
    assert meta["steps"] == 5 and meta["rows"] > 96  # the relabelled carry states came in

    onnx_path = tmp_path / "out" / "model.onnx"
    r = la.export(ckpt, onnx_path, parity_data=[data], parity_rows=50)
    assert r["parity"]["rows"] == 50 and r["parity"]["max_abs_diff"] < 1e-4

    import onnx
    import onnxruntime as ort

    m = onnx.load(str(onnx_path))
    assert [(o.domain, o.version) for o in m.opset_import if o.domain in ("", "ai.onnx")] == [
        ("", 17)
    ]
    k = la.visible_k()
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type, i.shape) for i in sess.get_inputs()] == [
        ("objects", "tensor(float)", [1, k, 4]),
        ("gantry", "tensor(float)", [1, 8]),
        ("held", "tensor(float)", [1, 1]),
        ("instruction", "tensor(int32)", [1, 3]),
    ]
    assert [(o.name, o.type, o.shape) for o in sess.get_outputs()] == [
        ("actions", "tensor(float)", [1, 4, 4])
    ]

    # The wrapper object the lockstep eval uses: an (H, D) chunk inside the action limits.
    z = np.load(data)
    obs = {
        "objects": z["objects"][0],
        "gantry": z["gantry"][0],
        "held": z["held"][0],
        "instruction": z["instruction_tokens"][0],
    }
    chunk = la.OnnxACTPolicy(onnx_path).act(obs)
    low, high = la.action_limits()
    assert chunk.shape == (4, 4) and chunk.dtype == np.float32
    assert (chunk >= low - 1e-6).all() and (chunk <= high + 1e-6).all()

    lin = json.loads((onnx_path.parent / "lineage.json").read_text())
    assert lin["implementation"] == meta["implementation"] and lin["params"] == meta["params"]
    assert lin["parity"]["max_abs_diff"] == r["parity"]["max_abs_diff"]
    assert lin["install_recipe"]["steps"]


def test_contract_check_rejects_a_wrong_graph(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("objects", TensorProto.FLOAT, [1, la.visible_k(), 4])
    y = helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, la.visible_k(), 4])
    g = helper.make_graph([helper.make_node("Identity", ["objects"], ["actions"])], "g", [x], [y])
    p = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    with pytest.raises(ValueError, match="contract"):
        la.check_contract(p, la.visible_k())


# -- the camera variant (lerobot_act_vision) ------------------------------------------------
def _camera_demo(path):
    """One short expert episode with the overhead camera (collect.py's file, real frames)."""
    from dataclasses import replace

    from examples.conveyor_sorting.collect import collect
    from examples.conveyor_sorting.config import EnvConfig

    collect(
        1,
        path,
        seed=5,
        cfg=replace(EnvConfig(), episode_objects=2, camera="overhead"),
        show_progress=False,
        instructions=[[2, 0, 1]],
    )
    return str(path)


def test_image_act_trains_exports_matches_torch_and_runs_in_the_camera_env(tmp_path):
    # torchvision first: imported after MuJoCo has rendered (the camera demo below), its
    # torch._dynamo -> triton import segfaulted this process (torch 2.14.1, 2 of 2 runs)
    import torchvision  # noqa: F401

    from examples.conveyor_sorting import lerobot_act_vision as lv
    from examples.conveyor_sorting.evaluate import evaluate
    from rtinfer.inference.graph_runner import GraphRunner
    from rtinfer.model.chunk_model import load_model

    data = _camera_demo(tmp_path / "camera.npz")
    ckpt, model_dir = tmp_path / "ckpt", tmp_path / "conveyor-act-vision"
    assert (
        lv.main(
            [
                "train",
                "--data",
                data,
                "--relabel",
                data,
                "--out",
                str(ckpt),
                "--steps",
                "2",
                "--batch",
                "4",
                "--log-every",
                "2",
                *TINY,
            ]
        )
        == 0
    )
    meta = json.loads((ckpt / "act.json").read_text())
    assert meta["config"]["vision_backbone"] == "resnet18"
    assert meta["config"]["pretrained_backbone_weights"] is None
    assert meta["backbone_params"] > 11_000_000  # the whole ResNet-18 trunk
    assert meta["image"]["input_hw"] == [16, 64] and meta["image"]["tokens"] == 2
    z = np.load(data)
    assert meta["rows"] > meta["frames"] == len(z["gantry"])  # relabelled rows reuse frames

    card = lv.export(ckpt, model_dir, parity_data=[data], parity_rows=20)
    assert card["lineage"]["parity"]["rows"] == 20
    assert card["lineage"]["parity"]["max_abs_diff"] < 1e-4  # metres; suction in [0, 1]
    model = load_model(model_dir)
    assert model.obs.images == {"overhead": ("overhead",)}
    assert model.obs.graph_inputs() == {
        "overhead": ("uint8", (1, 128, 128, 3)),
        "gantry": ("float32", (1, 8)),
        "held": ("float32", (1, 1)),
        "instruction": ("int32", (1, 3)),
    }
    # The node's runner on a recorded frame: a chunk inside the action limits.
    feeds = {
        "overhead": z["frame_overhead"][:1],
        "gantry": z["gantry"][:1],
        "held": z["held"][:1],
        "instruction": z["instruction_tokens"][:1],
    }
    chunk = GraphRunner(model).run(feeds)
    low, high = la.action_limits()
    assert chunk.shape == (4, 4) and (chunk >= low - 1e-6).all() and (chunk <= high + 1e-6).all()
    probe = lv.probe(model_dir, data, rows=12, write=False)
    assert probe["reaching"]["rows"] + probe["carrying"]["rows"] == 12
    # rtinfer eval's path: the env renders the camera the model reads.
    r = evaluate(str(model_dir), episodes=1, per_episode=1, instructions=["0,1,2"])
    assert r["spawned"] == 1


def test_image_act_refuses_a_file_without_frames_in_one_line(tmp_path):
    from examples.conveyor_sorting import lerobot_act_vision as lv

    data = str(_synthetic(tmp_path / "vectors.npz"))
    with pytest.raises(
        SystemExit,
        match=r"no frame_overhead array; collect it with "
        r"`python -m examples.conveyor_sorting.collect "
        r"--camera overhead`",
    ) as e:
        lv.load_data([data])
    assert "\n" not in str(e.value)
