"""examples/conveyor_sorting/train_vision_head.py: conveyor-act's policy rebuilt from its
shipped graph (the starting point of conveyor-vision's head), in the LeRobot venv
(`make test-lerobot`); skips elsewhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("onnxruntime")

from examples.conveyor_sorting.train_vision_head import PARITY_MAX, recover_head  # noqa: E402

HEAD = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-act" / "chunk_l0.onnx"


def observations(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows shaped like collect.py's: objects on the belt, a gantry in its workspace, a held
    class or none, an instruction."""
    rng = np.random.default_rng(seed)
    objects = np.zeros((n, 6, 4), np.float32)
    objects[..., 0] = rng.integers(0, 3, (n, 6))
    objects[..., 1] = rng.uniform(-0.7, 0.6, (n, 6))
    objects[..., 2] = rng.uniform(-0.15, 0.15, (n, 6))
    objects[..., 3] = rng.random((n, 6)) < 0.5
    objects[..., :3] *= objects[..., 3:]
    gantry = np.zeros((n, 8), np.float32)
    gantry[:, :3] = rng.uniform((-0.7, -0.25, 0.3), (0.6, 0.5, 0.6), (n, 3))
    gantry[:, 3:6] = rng.normal(0, 0.3, (n, 3))
    gantry[:, 6:8] = rng.integers(0, 2, (n, 2))
    return {
        "objects": objects,
        "gantry": gantry,
        "held": rng.integers(-1, 3, (n, 1)).astype(np.float32),
        "instruction": np.stack([rng.permutation(3) for _ in range(n)]).astype(np.int32),
    }


@pytest.mark.skipif(not HEAD.is_file(), reason="models/zoo/conveyor-act not built")
def test_conveyor_acts_policy_is_rebuilt_from_its_graph_with_its_actions():
    policy, stats, worst = recover_head(HEAD, observations(200))
    assert worst <= PARITY_MAX
    assert set(stats) == {"state", "env", "action"} and len(stats["env"]["mean"]) == 57
    assert sum(p.numel() for p in policy.parameters()) == 676_484  # conveyor-act's card
