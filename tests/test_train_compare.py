"""models.compare: a drafter's acceptance is measured teacher forced on the reference's own
greedy chunks (the shipped policy accepts all of its own tokens, and none it would not pick)."""

from __future__ import annotations

from pathlib import Path

from models.compare import acceptance
from models.quantise import STREAM, greedy_chunks, recorded_prefixes
from rtinfer.inference.backends import get_backend
from rtinfer.model.directory import ModelDir

ZOO = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-v1"


def test_the_shipped_policy_accepts_its_own_greedy_chunks_and_not_others():
    md = ModelDir.load(ZOO)
    prefixes = recorded_prefixes(md, ZOO / STREAM)[:20]
    chunks = greedy_chunks(get_backend("onnx").load(md, precision="fp32"), prefixes)
    assert acceptance(ZOO, prefixes, chunks).all()
    other = chunks.copy()
    other[:, 3] = (other[:, 3] + 128) % md.vocab.n_action_bins  # a token it would not pick
    got = acceptance(ZOO, prefixes, other)
    assert not got[:, 3].any() and got[:, :3].all()
