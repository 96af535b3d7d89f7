"""Decoding: speculative greedy is token-identical to plain greedy, rejection sampling keeps
the target distribution, streaming, adaptive speculation, prefix caching, no allocation."""

import tracemalloc

import numpy as np
import pytest
from conftest import random_obs_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder, speculative_accept
from rtinfer.inference.drafters import (
    ChunkReuseDrafter,
    DraftContext,
    EarlyExitDrafter,
    FixedDrafter,
)
from rtinfer.model.sequence import build_prefix, instruction_prefix, observation_segment

N = 12  # tiny model's chunk: H=3 x D=4


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return get_backend("onnx").load(tiny_model_dir)


def _prefix(backend, seed):
    md = backend.model
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(seed)))
    return build_prefix(md.vocab, instr, obs)


def _decode(backend, prefix, drafter=None, **kw):
    backend.reset()
    logits = backend.prefill(prefix, 0).copy()
    dec = Decoder(backend, **kw)
    return dec.decode(logits, len(prefix), N, drafter=drafter).copy(), dec


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, 2**32 - 1),
    plan_seed=st.integers(0, 2**32 - 1),
    depth=st.sampled_from([1, 2]),
)
def test_speculative_greedy_is_token_identical(backend, seed, plan_seed, depth):
    prefix = _prefix(backend, seed)
    plain, _ = _decode(backend, prefix)
    v = backend.model.vocab
    self_spec, _ = _decode(backend, prefix, EarlyExitDrafter(depth, v.action_start, v.action_stop))
    assert (self_spec == plain).all()
    # chunk reuse: a previous chunk that is partly right (the true tail) and partly random
    rng = np.random.default_rng(plan_seed)
    prev = np.concatenate([rng.integers(0, 32, 4), plain[:8]])
    reuse = ChunkReuseDrafter(3, 4)
    reuse.set_previous(prev, 0, int(rng.integers(0, 2)) * 50_000_000, 50_000_000)
    reused, _ = _decode(backend, prefix, reuse)
    assert (reused == plain).all()
    noise, _ = _decode(backend, prefix, FixedDrafter(rng.integers(0, 32, N)))
    assert (noise == plain).all()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, 2**32 - 1),
    plan_seed=st.integers(0, 2**32 - 1),
    prev_len=st.integers(0, 3),
    shift=st.integers(0, 3),
    gamma=st.sampled_from([None, 1, 2]),
)
def test_chunk_reuse_with_refinement_is_token_identical(
    backend, seed, plan_seed, prev_len, shift, gamma
):
    """Any previous chunk (right, shifted, random, at the bin limits so the extrapolated
    tail clips, shorter than the horizon, or none) and the Jacobi refinement leave greedy
    output token-identical to plain greedy, also for a second chunk decoded without a new
    set_previous (stale plan) and under a fixed speculation cap."""
    prefix = _prefix(backend, seed)
    plain, _ = _decode(backend, prefix)
    rng = np.random.default_rng(plan_seed)
    A = backend.model.vocab.n_action_bins
    prev = np.concatenate([rng.integers(0, 4, 4), plain])[: prev_len * 4].reshape(-1, 4)
    pick = rng.integers(0, 4, prev.shape)  # keep, random, lowest or highest bin
    prev = np.where(pick == 1, rng.integers(0, A, prev.shape), prev)
    prev = np.where(pick == 2, 0, np.where(pick == 3, A - 1, prev))
    d = ChunkReuseDrafter(3, 4)
    if prev_len:
        d.set_previous(prev, 0, shift * 50_000_000, 50_000_000)
    else:
        d.clear()
    for _ in range(2):
        backend.reset()
        logits = backend.prefill(prefix, 0).copy()
        out = Decoder(backend).decode(logits, len(prefix), N, drafter=d, gamma=gamma)
        assert (out == plain).all()


def test_correct_drafts_cut_target_passes_and_raise_gamma(backend):
    prefix = _prefix(backend, 1)
    plain, dec_plain = _decode(backend, prefix)
    good = FixedDrafter(plain.copy())
    out, dec = _decode(backend, prefix, good)
    assert (out == plain).all()
    assert dec.stats.target_passes < dec_plain.stats.target_passes == N - 1
    assert dec.stats.tokens_per_target_pass > 2.0
    assert good.acceptance == 1.0 and dec.gamma == dec.k_verify - 1
    bad = FixedDrafter((plain + 1) % 32)
    out, dec = _decode(backend, prefix, bad)
    assert (out == plain).all() and bad.stats["accepted"] == 0 and dec.gamma == 1


def test_waypoints_stream_once_each_in_order_as_soon_as_complete(backend):
    prefix = _prefix(backend, 2)
    seen = []
    backend.reset()
    logits = backend.prefill(prefix, 0).copy()
    dec = Decoder(backend)
    v = backend.model.vocab
    out = dec.decode(
        logits,
        len(prefix),
        N,
        drafter=EarlyExitDrafter(1, v.action_start, v.action_stop),
        dim=4,
        on_waypoint=lambda i, b: seen.append((i, b.copy())),
    )
    assert [i for i, _ in seen] == [0, 1, 2]
    assert np.array_equal(np.concatenate([b for _, b in seen]), out)


def test_chunk_reuse_shifts_by_elapsed_waypoints_and_extrapolates_the_tail(backend):
    d = ChunkReuseDrafter(horizon=3, dim=2)
    prev = np.array([[1, 2], [3, 4], [5, 6]])
    d.set_previous(prev, capture_ns=0, now_capture_ns=100, period_ns=100)
    ctx = DraftContext(backend, 0, 0, index=0)
    assert d.draft(ctx, 6).tolist() == [3, 4, 5, 6, 7, 8]  # tail: last step (2, 2) again
    d.set_previous(np.array([[1, 2], [3, 30], [5, 31]]), 0, 100, 100)
    assert d.draft(ctx, 6).tolist() == [3, 30, 5, 31, 7, 31]  # clipped to the 32 bins
    d.set_previous(prev, 0, 300, 100)  # the whole chunk has elapsed: nothing to reuse
    assert d.draft(ctx, 6).size == 0


def test_chunk_reuse_without_previous_extrapolates_this_chunks_final_waypoints(backend):
    d = ChunkReuseDrafter(horizon=4, dim=2)
    d.clear()
    chunk = np.array([10, 20, 12, 18, 0, 0, 0, 0])
    assert d.draft(DraftContext(backend, 0, 0, 1, chunk=chunk[:1]), 7).size == 0
    assert d.draft(DraftContext(backend, 0, 0, 2, chunk=chunk[:2]), 6).tolist() == [
        10,
        20,
        10,
        20,
        10,
        20,
    ]  # one waypoint final: hold it
    assert d.draft(DraftContext(backend, 0, 0, 4, chunk=chunk[:4]), 4).tolist() == [
        14,
        16,
        16,
        14,
    ]  # two: constant velocity


def test_chunk_reuse_refines_its_plan_with_the_verify_rows(backend):
    d = ChunkReuseDrafter(horizon=2, dim=2)
    d.set_previous(np.array([[1, 2], [3, 4], [5, 6]]), 0, 100, 100)
    assert d.draft(DraftContext(backend, 0, 0, 1, chunk=np.array([3])), 3).tolist() == [4, 5, 6]
    d.observe(1, 3)
    d.observe_target(np.array([4, 9, 7, 8]))  # rejected at row 1; rows 2, 3 behind it
    assert d.draft(DraftContext(backend, 0, 0, 3, chunk=np.array([3, 4, 9])), 1).tolist() == [7]


def test_chunk_reuse_keeps_a_held_dimensions_settling_offset_in_the_first_waypoint(backend):
    d = ChunkReuseDrafter(horizon=3, dim=2)
    d.set_previous(np.array([[10, 20], [12, 18], [14, 18]]), 0, 100, 100)
    # dim 1 holds 18 from the shift on: its first waypoint keeps the value due now (20)
    assert d.draft(DraftContext(backend, 0, 0, 0), 6).tolist() == [12, 20, 14, 18, 16, 18]
    d.set_previous(np.array([[10, 20], [12, 18], [14, 18]]), 0, 0, 100)  # no shift: as is
    assert d.draft(DraftContext(backend, 0, 0, 0), 6).tolist() == [10, 20, 12, 18, 14, 18]
    d.set_previous(np.array([[10, 20], [12, 18], [14, 18]]), 0, 200, 100)  # one left: as is
    assert d.draft(DraftContext(backend, 0, 0, 0), 2).tolist() == [14, 18]


def test_chunk_reuse_brakes_where_both_chunks_slow_down(backend):
    d = ChunkReuseDrafter(horizon=4, dim=1)
    ctx = DraftContext(backend, 0, 0, 0)
    d.set_previous(np.array([0, 10, 18, 24]), 0, 100, 100)  # steps 10, 8, 6
    assert d.draft(ctx, 4).tolist() == [10, 18, 24, 28]  # own steps 8, 6 -> 4
    d.set_previous(np.array([0, 3, 5, 6]), 0, 100, 100)  # steps 3, 2, 1
    assert d.draft(ctx, 4).tolist() == [3, 5, 6, 6]  # own 2, 1 -> 0: stops, never reverses
    d.set_previous(np.array([0, 5, 10, 15]), 0, 100, 100)  # steady: constant velocity
    assert d.draft(ctx, 4).tolist() == [5, 10, 15, 20]
    d = ChunkReuseDrafter(horizon=7, dim=1)  # once stopped, it stays stopped
    d.set_previous(np.array([0, 5, 9, 12, 14, 15]), 0, 200, 100)
    assert d.draft(ctx, 7).tolist() == [9, 12, 14, 15, 15, 15, 15]


def test_chunk_reuse_reanchors_the_next_waypoint_after_a_large_miss(backend):
    def after(target, accepted):
        d = ChunkReuseDrafter(horizon=3, dim=2)
        d.set_previous(np.array([[0, 0], [5, 5], [7, 7], [9, 9]]), 0, 100, 100)
        assert d.draft(DraftContext(backend, 0, 0, 1, chunk=np.array([5])), 5).tolist() == [
            5,
            7,
            7,
            9,
            9,
        ]
        d.observe(accepted, 5)
        d.observe_target(np.array(target))
        return d.draft(DraftContext(backend, 0, 0, 3, chunk=np.array([5, 5, 10])), 3).tolist()

    # row 1 (token 2) drafted 7, the target says 10: the row of the same dimension one
    # waypoint later (token 4, 12) was computed from the 7, so it moves by the miss
    assert after([5, 10, 7, 12, 9, 9], accepted=1) == [7, 15, 9]
    assert after([5, 8, 7, 12, 9, 9], accepted=1) == [7, 12, 9]  # a one-bin miss: kept


def test_every_verify_runs_the_verify_graph_and_chunk_reuse_keeps_the_full_window(backend):
    """Padding each verify to k_verify keeps one graph warm; a rejection does not shrink
    the chunk drafter's window (its drafts cost nothing and the verify refines them)."""
    prefix = _prefix(backend, 6)
    plain, _ = _decode(backend, prefix)
    d = ChunkReuseDrafter(3, 4)
    d.set_previous((plain + 1) % backend.model.vocab.n_action_bins, 0, 0, 50_000_000)
    sizes, windows = [], []
    step, draft = backend.step, d.draft
    backend.step = lambda tokens, *a: sizes.append(len(tokens)) or step(tokens, *a)
    d.draft = lambda ctx, k: windows.append((ctx.index, k)) or draft(ctx, k)
    try:
        out, dec = _decode(backend, prefix, d)
    finally:
        del backend.step
    assert (out == plain).all()
    assert set(sizes[-dec.stats.target_passes :]) == {dec.k_verify}
    assert all(k == min(dec.k_verify - 1, N - i) for i, k in windows)


def test_instruction_prefix_cache_gives_identical_tokens(backend):
    md = backend.model
    rng = np.random.default_rng(3)
    bodies = [random_obs_body(rng) for _ in range(4)]
    for b in bodies:
        b["values"]["instruction"] = np.array([2, 0, 1], np.int32)
    fresh = [_decode(backend, build_prefix(md.vocab, *md.obs.encode(b)))[0] for b in bodies]
    backend.reset()
    instr, _ = md.obs.encode(bodies[0])
    head = instruction_prefix(md.vocab, instr)
    backend.prefill(head, 0)  # once, then only the observation segment per cycle
    snap = backend.snapshot(len(head))
    dec = Decoder(backend)
    for i, b in enumerate(bodies):
        if i == 2:  # an unrelated sequence in between, then the snapshot restores the prefix
            backend.reset()
            backend.restore(snap)
        seg = observation_segment(md.vocab, md.obs.encode(b)[1])
        logits = backend.prefill(seg, len(head)).copy()
        assert (dec.decode(logits, len(head) + len(seg), N) == fresh[i]).all()


def test_greedy_decode_loop_allocates_nothing_per_token(backend):
    prefix = _prefix(backend, 4)
    v = backend.model.vocab
    drafter = EarlyExitDrafter(1, v.action_start, v.action_stop)
    reuse = ChunkReuseDrafter(3, 4)
    dec = Decoder(backend)
    prev = np.zeros((3, 4), np.int64)

    def cycle():
        logits = backend.prefill(prefix, 0)
        dec.decode(logits, len(prefix), N, drafter=drafter)
        reuse.set_previous(prev, 0, 50_000_000, 50_000_000)
        prev[:] = dec.decode(logits, len(prefix), N, drafter=reuse).reshape(3, 4)
        reuse.clear()
        dec.decode(logits, len(prefix), N, drafter=reuse)
        dec.decode(logits, len(prefix), N)

    for _ in range(5):
        cycle()  # warm-up: ORT arenas, caches
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    for _ in range(50):
        cycle()
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # 50 cycles, ~2400 tokens: no growth beyond a few bytes per token (counters' int
    # objects), and no transient the size of the KV (24 KB) or a stack of logits
    assert now - base < 8192
    assert peak - base < 16384


def _tv(a, b):
    return 0.5 * np.abs(a - b).sum()


@pytest.mark.parametrize("one_hot_draft", [False, True])
def test_rejection_sampling_keeps_the_target_distribution(one_hot_draft):
    rng = np.random.default_rng(0)
    A, g, trials = 5, 2, 20000
    p = rng.dirichlet(np.ones(A), size=g + 1)
    q = rng.dirichlet(np.ones(A), size=g)
    first = np.zeros(A)
    for _ in range(trials):
        if one_hot_draft:  # chunk reuse: a fixed draft token, q one-hot
            drafts, qq = np.array([1, 3]), None
        else:
            drafts = np.array([rng.choice(A, p=q[i]) for i in range(g)])
            qq = q
        a, nxt = speculative_accept(p, qq, drafts, rng)
        first[drafts[0] if a > 0 else nxt] += 1
    # the first emitted token must follow p[0] exactly as plain sampling would
    assert _tv(first / trials, p[0]) < 0.02


@pytest.mark.parametrize("drafter", ["self", "chunk"])
def test_sampled_speculative_decoding_stays_in_action_range(backend, drafter):
    prefix = _prefix(backend, 5)
    v = backend.model.vocab
    if drafter == "self":
        d = EarlyExitDrafter(2, v.action_start, v.action_stop)
    else:
        d = ChunkReuseDrafter(3, 4)
        d.set_previous(_decode(backend, prefix)[0], 0, 50_000_000, 50_000_000)
    out, dec = _decode(backend, prefix, d, sample=True, temperature=0.8, seed=1)
    assert out.shape == (N,) and out.min() >= 0 and out.max() < v.n_action_bins
    assert dec.stats.verifies > 0


def test_decode_bench_runs_every_variant_on_every_cycle_and_checks_identity(tiny_model_dir):
    from rtinfer.bench.decode import run

    r = run(tiny_model_dir, cycles=5, run_length=2)
    assert r["identical"] is True and r["cycles"] == 5 and r["run_length"] == 2
    assert set(r["drafters"]) == {"self", "chunk"}
    assert r["speedup"] == r["drafters"][r["best_drafter"]]["speedup"] > 0
    assert all(d["cpu_speedup"] > 0 for d in r["drafters"].values())  # on thread CPU time


def test_decode_bench_measures_a_draft_model_beside_the_other_drafters(tiny_model_dir):
    from rtinfer.bench.decode import run

    r = run(tiny_model_dir, cycles=3, run_length=1, draft_model=tiny_model_dir)
    assert set(r["drafters"]) == {"self", "chunk", "model"} and r["identical"] is True
    assert r["drafters"]["model"]["acceptance"] == 1.0  # the target drafting for itself
