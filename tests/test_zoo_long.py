"""conveyor-v1-long: the 16-waypoint token policy trained to continue a committed prefix.

Its chunk covers 800 ms, its card declares how many committed waypoints it conditions on, and
forced as a decoding prefix (real-time chunking) those waypoints come back as they went in
while the waypoints after them continue what the robot executed (held-out rows: an
observation d old and the expert's executed waypoints as the prefix)."""

import json
from pathlib import Path

import numpy as np
import pytest

from examples.conveyor_sorting.token_long import delayed_rows
from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix

LONG = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-v1-long"
needs_model = pytest.mark.skipif(not LONG.is_dir(), reason="models/zoo/conveyor-v1-long not built")


def test_delayed_rows_start_with_what_was_executed_and_go_on_with_the_later_plan():
    # 2 episodes of 4 steps; chunk h of row i holds 100 * i + h (H = 3, D = 1)
    episode = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    actions = (100 * np.arange(8)[:, None] + np.arange(3)[None, :])[..., None]
    keep, chunks = delayed_rows(episode, actions, np.full(8, 2))
    assert keep.tolist() == [0, 1, 4, 5]  # rows 2, 3, 6, 7 would reach past their episode
    assert chunks[0, :, 0].tolist() == [0, 100, 200]  # rows 0, 1 executed, then row 2's plan
    assert chunks[3, :, 0].tolist() == [500, 600, 700]
    keep, chunks = delayed_rows(episode, actions, np.full(8, 1))
    assert chunks[1, :, 0].tolist() == [100, 200, 201]


@needs_model
def test_long_model_covers_800_ms_and_declares_its_committed_horizon():
    md = ModelDir.load(LONG)
    card = json.loads((LONG / "card.json").read_text())
    assert md.tokenizer.horizon == 16 and md.tokenizer.period_ns == 50_000_000
    assert 0 < card["max_committed"] < md.tokenizer.horizon
    assert card["rtc"]["max_committed"] == card["max_committed"]
    lock = card["success"]["lockstep"]["models"]
    assert lock["models/zoo/conveyor-v1-long"]["spawned"] > 0


@needs_model
def test_a_forced_prefix_comes_back_as_sent_and_the_rest_continues_it():
    md = ModelDir.load(LONG)
    backend = get_backend("onnx").load(LONG)
    tok = ActionTokenizer(md.tokenizer)
    v, D, N = md.vocab, md.tokenizer.dim, md.tokenizer.horizon * md.tokenizer.dim
    with np.load(LONG / "rtc_rows.npz") as z:
        instr, obs, labels, k = (
            z[n] for n in ("instruction_tokens", "obs_tokens", "action_tokens", "committed")
        )
    near = []
    for i in range(len(obs)):
        forced = labels[i, : k[i]].reshape(-1)
        prefix = build_prefix(v, instr[i], obs[i])
        backend.reset()
        logits = backend.prefill(prefix, 0).copy()
        out = Decoder(backend).decode(logits, len(prefix), N, forced=forced, dim=D).copy()
        assert (out[: len(forced)] == forced).all()
        got = tok.decode(out.reshape(-1, D).astype(np.int32))[k[i], :3]
        want = tok.decode(labels[i].astype(np.int32))[k[i], :3]
        near.append(np.abs(got - want).max() < 0.03)  # m: the first waypoint it chose
    assert np.mean(near) >= 0.8, f"{np.mean(near):.2f} of held-out rows within 3 cm"
