"""examples/lerobot_flow: LeRobot's DiffusionPolicy (DDIM) packaged as a flow model directory
and served.

Runs where lerobot is installed (the LeRobot venv: `make lerobot-env`, then
`.venv-lerobot/bin/python -m pytest tests/test_lerobot_diffusion.py`); skips elsewhere.
Builds a small Diffusion Policy (state, environment state and a 24x24 camera through
LeRobot's ResNet-18 encoder; random weights) in a temporary directory, packages it with the
example's CLI, and checks rtinfer's DDIM chunk against LeRobot's own preprocessor -> predict_action_chunk ->
postprocessor (noise_scheduler_type "DDIM", num_inference_steps = the level's) with the same
observation and noise at every level, directly and through a real InferenceNode over ipc.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("diffusers")
pytest.importorskip("onnxruntime")

from examples.lerobot_flow import checkpoint, diffusion, tiny  # noqa: E402
from examples.lerobot_flow.__main__ import main  # noqa: E402
from examples.lerobot_flow.package import ATOL, parity  # noqa: E402


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    root = tmp_path_factory.mktemp("diffusion")
    assert main(["tiny", "diffusion", "--out", str(root / "ckpt"), "--image", "24"]) == 0
    assert main(["package", "--checkpoint", str(root / "ckpt"), "--out", str(root / "model")]) == 0
    return root / "ckpt", root / "model", checkpoint.load(root / "ckpt")


def test_every_ddim_level_matches_lerobots_predict_action_chunk(packaged):
    _, model_dir, ckpt = packaged
    card = json.loads((model_dir / "card.json").read_text())
    assert [lv["steps"] for lv in card["levels"]] == [10, 4, 2, 1]
    assert all(lv["parity_max_abs"] <= ATOL for lv in card["levels"])
    report = parity(ckpt, model_dir, n_obs=2, seed=11)
    assert len(report) == 8 and max(r["max_abs_diff"] for r in report) <= ATOL
    # Not vacuous: the step count moves LeRobot's chunk.
    obs = diffusion.example_inputs(ckpt, seed=5)
    noise = np.random.default_rng(0).standard_normal((1, 16, 4)).astype(np.float32)
    assert (
        np.abs(
            diffusion.reference(ckpt, obs, noise, 10) - diffusion.reference(ckpt, obs, noise, 2)
        ).max()
        > 1e-3
    )


def test_the_manifest_carries_lerobots_ddim_schedule(packaged):
    _, model_dir, ckpt = packaged
    g = json.loads((model_dir / "graphs.json").read_text())
    assert g["kind"] == "flow" and g["integrator"] == "ddim"
    sched = ckpt.policy.diffusion.noise_scheduler
    assert type(sched).__name__ == "DDIMScheduler"
    assert np.allclose(g["ddim"]["alphas_cumprod"], sched.alphas_cumprod.numpy())
    assert g["ddim"]["prediction"] == "epsilon" and g["ddim"]["clip_sample"] == 1.0
    obs = json.loads((model_dir / "obs_spec.json").read_text())["inputs"]
    assert [(e["key"], e["dtype"], e["shape"]) for e in obs] == [
        ("state", "float32", [10]),
        ("environment_state", "float32", [6]),
        ("top", "uint8", [24, 24, 3]),
    ]


def test_n_obs_steps_above_one_is_refused_in_one_line_with_the_fix(tmp_path, capsys):
    ck = tiny.diffusion(tmp_path / "ckpt", down_dims=(16, 32), n_obs_steps=2)
    assert main(["package", "--checkpoint", str(ck), "--out", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err.strip()
    assert "n_obs_steps 2; " in err and "train with n_obs_steps=1" in err and "\n" not in err
    assert not (tmp_path / "model").exists()


def test_a_node_serves_lerobots_chunk(packaged, tmp_path):
    from lerobot_flow_serve import serve_one

    _, model_dir, ckpt = packaged
    obs = diffusion.example_inputs(ckpt, seed=7)
    chunk, noise = serve_one(model_dir, obs, tmp_path)
    ref = diffusion.reference(ckpt, obs, noise, 10)
    assert chunk.shape == (8, 4)
    assert np.abs(chunk - np.clip(ref, -3.0, 3.0)).max() <= ATOL
