"""conveyor-vision: the encoder's geometry, its decoding into observe.py's arrays, and the
shipped model directory run on frames the cell's camera renders."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from examples.conveyor_sorting.config import CellConfig, EnvConfig  # noqa: E402
from examples.conveyor_sorting.env import ConveyorSortEnv  # noqa: E402
from examples.conveyor_sorting.expert import ScriptedExpert  # noqa: E402
from examples.conveyor_sorting.vision import PATCH, VisionConfig, VisionEncoder, targets  # noqa: E402

MODEL = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-vision"
CLASS_CHANNEL = {0: 0, 1: 1, 2: 2}  # box red, cylinder green, sphere blue (config.DEFAULT_CLASSES)


def rendered(steps: int = 300, every: int = 10, seed: int = 5, expert: bool = True):
    """Observations (with their frames) from an episode in the camera env: the scripted
    expert's, or with the gantry parked at home (the objects ride the belt untouched)."""
    env = ConveyorSortEnv(EnvConfig(camera="overhead"))
    obs, _ = env.reset(seed=seed)
    policy = ScriptedExpert(env.cfg.cell, env.tokenizer_cfg)
    policy.reset()
    park = np.tile(np.float32([*env.cfg.cell.gantry_home, 0.0]), (env.cfg.horizon, 1))
    out = []
    for k in range(steps):
        if k % every == 0:
            out.append(obs)
        obs, *_ = env.step(policy.act(obs) if expert else park)
    env.close()
    return out


def enc_centre(cfg, cell, tok, dx, dy):
    from examples.conveyor_sorting.vision import patch_centres, patch_size_m

    return patch_centres(cfg, cell)[tok] + np.array([dx, dy]) * patch_size_m(cfg, cell)


@pytest.fixture(scope="module")
def frames():
    return rendered()


def test_an_objects_patch_shows_its_class_colour():
    """The grid's geometry against the renderer: at an object's projected centre the pixel
    has its class's colour (objects away from the cup, which covers what it picks; one
    just dropped on the belt may still be above it: 90 % must show, within a pixel)."""
    cfg, cell = VisionConfig(), CellConfig()
    seen = right = 0
    for obs in rendered(steps=400, every=20, expert=False):
        t = targets(cfg, cell, obs["objects"][None], obs["gantry"][None], obs["held"][None])
        for tok in np.flatnonzero(t["obj"][0]):
            row, col = divmod(int(tok), cfg.grid)
            dx, dy = t["off"][0, tok]
            if np.hypot(*(obs["gantry"][:2] - enc_centre(cfg, cell, tok, dx, dy))) < 0.08:
                continue
            py, px = int((row + 0.5 - dy) * PATCH), int((col + 0.5 + dx) * PATCH)
            near = obs["frames"]["overhead"][0][max(py - 1, 0) : py + 2, max(px - 1, 0) : px + 2]
            near = near.reshape(-1, 3).astype(int)
            right += bool(
                (
                    (near.argmax(1) == CLASS_CHANNEL[int(t["cls"][0, tok])])
                    & (near.max(1) - near.min(1) > 40)
                ).any()
            )
            seen += 1
    assert seen >= 20 and right >= 0.9 * seen, (right, seen)


def test_decoding_orders_downstream_first_and_drops_the_held_object():
    cfg = VisionConfig()
    enc = VisionEncoder(cfg, CellConfig())
    n = cfg.tokens
    det = torch.full((1, n, 1 + cfg.classes + 2), -10.0)
    det[..., -2:] = 0.0
    idx = torch.arange(n)[None]
    belt_row = int(torch.argmin(enc.centres[:, 1].abs())) // cfg.grid
    a, b, c = (belt_row * cfg.grid + col for col in (4, 10, 9))
    # three objects on the belt: tokens a (class 1), b (class 2), c (class 0: under the cup);
    # and a fourth, likelier one off the belt (in a bin's row): not an object of `objects`
    det[0, 5, 0] = 12.0
    for tok, cls in ((a, 1), (b, 2), (c, 0)):
        det[0, tok, 0] = 10.0
        det[0, tok, 1 + cls] = 5.0
    out = {"det": det, "idx": idx, "held": torch.tensor([[0.0, 0.0, 9.0, 0.0]])}
    objects, held = enc.objects_and_held(out)
    xs = objects[0, :3, 1].tolist()
    assert objects[0, :3, 3].tolist() == [1.0, 1.0, 1.0] and xs == sorted(xs, reverse=True)
    assert objects[0, 3:].abs().sum() == 0 and held.item() == 1.0
    assert objects[0, 0, 0].item() == 2.0  # token b is the most downstream (largest x)
    det[0, a + 1, :] = det[0, a]  # a double of a, a patch away: one object
    det[0, a + 1, 0] = 9.0
    det[0, a + 1, -2] = -0.7  # 0.3 patches (~2.6 cm) from a's centre
    objects, _ = enc.objects_and_held(out)
    assert objects[0, :, 3].sum().item() == 3.0
    gantry = torch.zeros(1, 8)
    gantry[0, :2] = enc.centres[c]
    gantry[0, 7] = 1.0  # holding: what is under the cup is the held object
    objects, _ = enc.objects_and_held(out, gantry)
    assert objects[0, :, 3].sum().item() == 2.0
    assert 0.0 not in objects[0, :2, 0].tolist()


def test_objects_near_a_cup_that_holds_nothing_are_the_picks():
    from examples.conveyor_sorting.train_vision import near_cup

    objects = np.zeros((2, 6, 4), np.float32)
    objects[:, :3] = [[0, 0.10, 0.0, 1], [1, 0.13, 0.02, 1], [2, 0.30, 0.0, 1]]
    objects[:, 3] = [0, 0.10, 0.0, 0]  # an unused slot at the cup
    gantry = np.zeros((2, 8), np.float32)
    gantry[:, :3] = [0.10, 0.0, 0.37]
    gantry[1, 7] = 1.0  # the second cup holds: what is under it is not on the belt
    assert near_cup(objects, gantry).tolist() == [
        [True, True, False, False, False, False],
        [False] * 6,
    ]


def test_card_records_success_per_instruction_cost_and_lineage_of_each_level():
    card = json.loads((MODEL / "card.json").read_text())
    graphs = json.loads((MODEL / "graphs.json").read_text())["graphs"]
    assert len(card["levels"]) == len(graphs)
    for level, graph in zip(card["levels"], graphs):
        s = level["success"]
        assert set(s["per_instruction"]) == {"0,1,2", "0,2,1", "1,0,2", "1,2,0", "2,0,1", "2,1,0"}
        assert s["min_success_rate"] == min(s["per_instruction"].values())
        assert s["correct"] + s["wrong"] + s["missed"] + s["dropped"] <= s["spawned"]
        assert s["episodes"] >= 6 and s["seed"] == 7000  # card_eval's held-out scenes
        assert 0 < level["chunk"]["p50_ms"] <= level["chunk"]["p99_ms"]
        assert hashlib.sha256((MODEL / graph["file"]).read_bytes()).hexdigest() == graph["sha256"]
    assert card["params"] == card["encoder"]["params"] + card["head"]["params"]
    assert card["lineage"]["data"] and card["lineage"]["training"]


def test_shipped_model_runs_every_level_on_rendered_frames(frames):
    from examples.conveyor_sorting.observe import obs_body
    from rtinfer.inference.graph_runner import GraphRunner
    from rtinfer.model.chunk_model import load_model

    model = load_model(MODEL)
    assert model.obs.cameras == {"overhead"} and "objects" not in model.obs.keys
    runner = GraphRunner(model)
    low, high = np.array(model.action.low), np.array(model.action.high)
    card_tokens = [lvl["visual_tokens"] for lvl in model.card["levels"]]
    assert card_tokens == sorted(card_tokens, reverse=True) and card_tokens[0] == 256
    for obs in frames[::4]:
        body = obs_body(obs)
        for level in range(len(model.levels)):
            chunk = runner.run(model.obs.feeds(body), level)
            assert chunk.shape == (1, model.action.horizon, len(low)) or chunk.shape == (
                model.action.horizon,
                len(low),
            )
            assert np.isfinite(chunk).all()
            assert (chunk.reshape(-1, len(low)) >= low - 0.05).all()
            assert (chunk.reshape(-1, len(low)) <= high + 0.05).all()
