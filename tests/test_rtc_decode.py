"""A committed prefix forced as a decoding prefix: its tokens are fed, not sampled, in one
pass; the rest is what greedy decoding gives after them, with or without speculation; with
nothing committed the decode is the plain one, token for token."""

import numpy as np
import pytest
from conftest import random_obs_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.inference.backends import get_backend
from rtinfer.inference.budget import default_levels
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter, EarlyExitDrafter
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import build_prefix
from rtinfer.transport.committed import Committed

N, D = 12, 4  # tiny model's chunk: H=3 x D=4


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return get_backend("onnx").load(tiny_model_dir)


def _prefix(backend, seed):
    md = backend.model
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(seed)))
    return build_prefix(md.vocab, instr, obs)


def _decode(backend, prefix, forced=None, drafter=None, depth=None):
    backend.reset()
    logits = backend.prefill(prefix, 0).copy()
    dec = Decoder(backend)
    out = dec.decode(logits, len(prefix), N, drafter=drafter, forced=forced, depth=depth, dim=D)
    return out.copy(), dec.stats


def _teacher_forced(backend, prefix, forced, depth=None):
    """The reference: the forced tokens fed one step each, then greedy, one step a token."""
    v = backend.model.vocab
    a0, a1 = v.action_start, v.action_stop
    backend.reset()
    backend.prefill(prefix, 0)
    pos, out = len(prefix), [int(t) for t in forced]
    for i, t in enumerate(forced):
        logits = backend.step(np.array([t + a0]), pos + i, depth)[0]
    while len(out) < N:
        out.append(int(logits[a0:a1].argmax()))
        if len(out) < N:
            logits = backend.step(np.array([out[-1] + a0]), pos + len(out) - 1, depth)[0]
    return np.array(out)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), waypoints=st.integers(1, 2), bins_seed=st.integers(0, 99))
def test_forced_prefix_is_fed_in_one_pass_and_the_rest_is_greedy_after_it(
    backend, seed, waypoints, bins_seed
):
    prefix = _prefix(backend, seed)
    bins = backend.model.vocab.n_action_bins
    forced = np.random.default_rng(bins_seed).integers(0, bins, waypoints * D)
    out, stats = _decode(backend, prefix, forced)
    assert (out[: len(forced)] == forced).all()
    assert (out == _teacher_forced(backend, prefix, forced)).all()
    assert stats.forced == len(forced) and stats.forced_passes == 1
    v = backend.model.vocab
    for drafter in (ChunkReuseDrafter(3, D), EarlyExitDrafter(1, v.action_start, v.action_stop)):
        spec, _ = _decode(backend, prefix, forced, drafter)
        assert (spec == out).all()  # speculation after the prefix stays lossless


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_nothing_committed_is_the_plain_decode(backend, seed):
    prefix = _prefix(backend, seed)
    plain, _ = _decode(backend, prefix)
    empty, stats = _decode(backend, prefix, np.zeros(0, np.int64))
    assert (empty == plain).all() and stats.forced == stats.forced_passes == 0


def test_forced_prefix_at_an_early_exit_is_teacher_forced_at_that_depth(backend):
    prefix = _prefix(backend, 7)
    forced = np.arange(D) + 3
    out, stats = _decode(backend, prefix, forced, depth=1)
    assert (out == _teacher_forced(backend, prefix, forced, depth=1)).all()
    assert stats.target_passes == 0 and stats.forced_passes >= 1


def test_a_chunk_entirely_committed_takes_no_pass(backend):
    forced = np.arange(N) % 7
    out, stats = _decode(backend, _prefix(backend, 3), forced)
    assert (out == forced).all() and stats.forced_passes == 0 and stats.target_passes == 0


def test_forced_tokens_cost_one_pass_not_a_step_each(backend):
    """The cost in passes: 8 committed tokens (two waypoints) take one forward pass of the
    verify graph; fed as decode steps they would take 8."""
    prefix = _prefix(backend, 11)
    forced = np.arange(2 * D) % 5
    _, plain = _decode(backend, prefix)
    _, stats = _decode(backend, prefix, forced)
    assert stats.forced_passes == 1
    # plain greedy: a pass per token after the first; forced: one pass, then a pass per
    # token after the first free one
    assert plain.target_passes == N - 1
    assert stats.target_passes == 1 + (N - len(forced) - 1)


def test_runner_forces_the_cycles_committed_waypoints_and_marks_them_used(tiny_model_dir):
    r = TokenRunner(ModelDir.load(tiny_model_dir), drafter="chunk")
    md = r.model
    level = default_levels(md, r.decoder.k_verify)[0]
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(5)))
    plain = Cycle(1, {}, 1_000, level, level.chunk)
    free = r.run_cycle(plain, instr, obs).copy()
    tok = ActionTokenizer(md.tokenizer)
    values = tok.decode(np.array([[1, 2, 3, 4]]))  # bin centres, as a robot's plan holds
    c = Committed(0, 1, values, 51_000)
    cycle = Cycle(2, {}, 1_000, level, level.chunk, committed=c)
    got = r.run_cycle(cycle, instr, obs)
    assert c.used and list(got[:D]) == [1, 2, 3, 4]
    assert cycle.stats.forced == D
    assert plain.committed is None and len(free) == len(got)


def test_forced_prefix_bench_runs_and_counts_one_pass_per_prefix(tiny_model_dir):
    from rtinfer.bench.forced_prefix import measure

    out = measure(tiny_model_dir, rounds=2)
    assert [r["committed_waypoints"] for r in out["rows"]] == [1, 2]
    for r in out["rows"]:
        assert r["forced_passes"] == 1
        assert r["target_passes_forced"] == 1 + (out["chunk_tokens"] - r["forced_tokens"] - 1)
