"""examples/lerobot_flow: LeRobot's SmolVLAPolicy packaged as a flow model directory and served.

Runs where lerobot and transformers are installed (the LeRobot venv: `make lerobot-env`, then
`.venv-lerobot/bin/python -m pytest tests/test_lerobot_smolvla.py`); skips elsewhere.
Builds a small SmolVLA in a temporary directory (a SmolVLM config and a tokenizer made here,
random weights, no hub), packages it with the example's CLI, and checks rtinfer's chunk
against LeRobot's own preprocessor -> predict_action_chunk -> postprocessor with the same
observation and noise at every level, directly and through a real InferenceNode over ipc.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from examples.lerobot_flow import checkpoint, smolvla  # noqa: E402
from examples.lerobot_flow.__main__ import main  # noqa: E402
from examples.lerobot_flow.package import ATOL, parity  # noqa: E402


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    root = tmp_path_factory.mktemp("smolvla")
    assert main(["tiny", "smolvla", "--out", str(root / "ckpt")]) == 0
    assert main(["package", "--checkpoint", str(root / "ckpt"), "--out", str(root / "model")]) == 0
    return root / "ckpt", root / "model", checkpoint.load(root / "ckpt")


def test_every_level_matches_lerobots_predict_action_chunk(packaged):
    ckpt_dir, model_dir, ckpt = packaged
    card = json.loads((model_dir / "card.json").read_text())
    assert [lv["steps"] for lv in card["levels"]] == [10, 4, 2, 1]
    assert all(lv["parity_max_abs"] <= ATOL for lv in card["levels"])
    assert card["lineage"]["implementation"].endswith("SmolVLAPolicy")
    # Again on observations the package did not see.
    report = parity(ckpt, model_dir, n_obs=2, seed=11)
    assert len(report) == 8 and max(r["max_abs_diff"] for r in report) <= ATOL


def test_the_levels_and_the_task_change_the_chunk(packaged):
    """Parity is not vacuous: the step count and the task tokens both move LeRobot's chunk."""
    _, _, ckpt = packaged
    obs = smolvla.example_inputs(ckpt, seed=5)
    noise = np.random.default_rng(0).standard_normal((1, 8, 8)).astype(np.float32)
    ten = smolvla.reference(ckpt, obs, noise, 10)
    assert np.abs(ten - smolvla.reference(ckpt, obs, noise, 1)).max() > 1e-3
    other = dict(obs, task_tokens=smolvla.tokenize(ckpt, "put the blue cube into the left bin"))
    assert (
        np.abs(
            ten
            - smolvla.reference(ckpt, other, noise, 10, task="put the blue cube into the left bin")
        ).max()
        > 1e-3
    )
    # The graph's task_tokens are what LeRobot's own preprocessor tokenizes.
    batch = ckpt.pre(
        {
            "observation.state": __import__("torch").zeros(6),
            "observation.images.top": __import__("torch").zeros(3, 32, 32),
            "task": smolvla.TASK,
        }
    )
    assert batch["observation.language.tokens"][0].tolist() == obs["task_tokens"].tolist()


def test_the_directory_holds_the_contract_and_check_model_passes(packaged):
    _, model_dir, ckpt = packaged
    g = json.loads((model_dir / "graphs.json").read_text())
    assert g["kind"] == "flow" and g["integrator"] == "euler"
    assert g["levels"] == [
        {"level": i, "steps": k, "graph": 0} for i, k in enumerate([10, 4, 2, 1])
    ]
    obs = json.loads((model_dir / "obs_spec.json").read_text())["inputs"]
    assert [(e["key"], e["dtype"], e["shape"]) for e in obs] == [
        ("top", "uint8", [32, 32, 3]),
        ("state", "float32", [6]),
        ("task_tokens", "int32", [8]),
    ]
    import onnxruntime as ort

    step = ort.InferenceSession(str(model_dir / "step.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in step.get_inputs()]
    assert names[0] == "prefix_mask" and names[-2:] == ["x_t", "t"] and len(names) == 1 + 2 * 4 + 2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir / "tokenizer")
    assert (
        tok(smolvla.TASK + "\n", padding="max_length", max_length=8)["input_ids"]
        == smolvla.tokenize(ckpt, smolvla.TASK).tolist()
    )
    r = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "check-model", str(model_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True


def test_a_node_serves_lerobots_chunk(packaged, tmp_path):
    from lerobot_flow_serve import serve_one

    _, model_dir, ckpt = packaged
    obs = smolvla.example_inputs(ckpt, seed=7)
    chunk, noise = serve_one(model_dir, obs, tmp_path)
    ref = smolvla.reference(ckpt, obs, noise, 10)
    assert chunk.shape == (8, 4)
    assert np.abs(chunk - np.clip(ref, -3.0, 3.0)).max() <= ATOL


def test_lerobots_default_longest_padding_gives_the_same_chunk(packaged):
    """LeRobot's default pad_language_to "longest" feeds the task unpadded; the graph's
    static task_tokens pad it to tokenizer_max_length, masked: the same chunk."""
    from lerobot.processor import TokenizerProcessorStep

    _, model_dir, ckpt = packaged
    step = ckpt.step(ckpt.pre, TokenizerProcessorStep)
    saved, step.padding = step.padding, "longest"
    try:
        report = parity(ckpt, model_dir, n_obs=1, seed=4)
    finally:
        step.padding = saved
    assert max(r["max_abs_diff"] for r in report) <= ATOL
