"""Batched decoding (issue 19): batched graphs equal their batch-1 twins to the bit, and each
robot's tokens in a batch equal its own plain greedy decode, whatever else shares the batch.
The shipped policy's batched graphs and the tiny model's, on ONNX Runtime."""

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.inference.batch import BatchRunner, Row
from rtinfer.inference.budget import default_levels
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.directory import ModelDir

ZOO = "models/zoo/conveyor-v1"


@pytest.fixture(scope="module")
def shipped():
    md = ModelDir.load(ZOO)
    assert md.batches == [2, 3, 4, 5, 6, 8], "the shipped policy ships batched graphs"
    z = np.load(md.path / "stream.npz")
    return (
        md,
        z["instruction_tokens"],
        z["obs_tokens"],
        BatchRunner(md),
        TokenRunner(md, drafter="none"),
    )


def test_every_shipped_batched_graph_equals_its_batch_1_twin():
    from models.export_batched import check_rows

    md = ModelDir.load(ZOO)
    for (b, depth, k), g in md.batched.items():
        assert (
            check_rows(
                md.path / g["file"], md.path / f"step_d{depth}_k{k}.onnx", depth, k, b, seed=b
            )
            == 0.0
        ), g["file"]


def _rows(md, instr, obs, offsets, t, level, previous):
    period = md.tokenizer.period_ns
    return [
        Row(
            Cycle(t, {}, t * period, level, level.chunk, f"r{r}", previous[r]),
            instr[(o + t) % len(obs)],
            obs[(o + t) % len(obs)],
        )
        for r, o in enumerate(offsets)
    ]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    offsets=st.lists(st.integers(0, 299), min_size=2, max_size=8),
    level=st.sampled_from([0, 1, 2, 3, 4]),
    rounds=st.integers(1, 3),
)
def test_each_row_is_its_own_plain_greedy(shipped, offsets, level, rounds):
    """Rows of any batch size, at any budget level (speculative or at an exit), over a few
    cycles (so each row drafts from its own previous chunk): every row's chunk is the plain
    greedy chunk of its observation alone."""
    md, instr, obs, br, plain = shipped
    lv = default_levels(md, br.k_verify)[level]
    previous = [None] * len(offsets)
    for t in range(rounds):
        rows = _rows(md, instr, obs, offsets, t, lv, previous)
        got = [b.copy() for b in br.run(rows)]
        for r, row in enumerate(rows):
            ref, _ = plain.run(row.instr, row.obs, None, lv)
            assert np.array_equal(got[r], ref), (r, offsets, level, t)
            previous[r] = row.cycle.previous


def test_waypoints_stream_per_row_in_order(shipped):
    md, instr, obs, br, _ = shipped
    lv = default_levels(md, br.k_verify)[0]
    seen = {}

    def on_waypoint(cycle, index, bins):
        assert cycle.first_token_ns > 0
        seen.setdefault(cycle.dest, []).append((index, bins.copy()))

    rows = _rows(md, instr, obs, [0, 50, 100], 0, lv, [None] * 3)
    out = br.run(rows, on_waypoint)
    D = md.tokenizer.dim
    for r, row in enumerate(rows):
        got = seen[row.cycle.dest]
        assert [i for i, _ in got] == list(range(lv.chunk))
        assert np.array_equal(np.concatenate([b for _, b in got]), out[r][: lv.chunk * D])


def test_the_drafts_are_used_and_a_batch_costs_fewer_passes_than_its_rows(shipped):
    """A second cycle drafts from the first chunk: verifies accept drafts, and the batch ran
    fewer passes than its rows would alone (the point of batching)."""
    md, instr, obs, br, _ = shipped
    lv = default_levels(md, br.k_verify)[0]
    previous = [None] * 4
    for t in range(2):
        rows = _rows(md, instr, obs, [0, 40, 80, 120], t, lv, previous)
        br.run(rows)
        previous = [r.cycle.previous for r in rows]
    assert sum(s.accepted for s in br.stats[:4]) > 0
    assert all(s.verifies > 0 for s in br.stats[:4])


@pytest.fixture(scope="module")
def tiny_batched(tiny_model_dir, tmp_path_factory):
    from models.export_batched import export_batched

    out = tmp_path_factory.mktemp("tiny_batched") / "m"
    shutil.copytree(tiny_model_dir, out)
    report = export_batched(out, (2, 4))
    assert report and set(report.values()) == {0.0}
    return ModelDir.load(out)


def test_a_tiny_model_with_inline_weights_batches_too(tiny_batched):
    md = tiny_batched
    br, plain = BatchRunner(md), TokenRunner(md, drafter="none")
    rng = np.random.default_rng(1)
    for lv in default_levels(md, br.k_verify):
        rows = [
            Row(
                Cycle(0, {}, None, lv, lv.chunk, f"r{i}"),
                rng.integers(0, md.vocab.n_instr, md.obs.instr_length),
                rng.integers(0, md.obs.bins, md.obs.length),
            )
            for i in range(3)
        ]
        for row, got in zip(rows, [b.copy() for b in br.run(rows)]):
            ref, _ = plain.run(row.instr, row.obs, None, lv)
            assert np.array_equal(got, ref)


def test_a_directory_without_batched_graphs_is_refused_with_the_fix(tiny_model_dir):
    with pytest.raises(ValueError, match="export_batched"):
        BatchRunner(ModelDir.load(tiny_model_dir))
