"""A budget level that decodes at an exit depth alone (no speculation) prefills the observation
at that depth too, when the model exported the prefill graph there, so it skips the deeper
layers entirely: the cheapest level's chunk time is no longer bounded by a full-depth prefill.
Checked on the tiny exported model with ONNX Runtime (no timing asserted: the benchmark is
docs/benchmarks.md's stress demo)."""

import numpy as np
import pytest
from conftest import TINY_SPEC, random_obs_body

from rtinfer.inference.budget import BudgetLevel
from rtinfer.model.directory import ModelDir
from rtinfer.model.obs_tokens import ObsTokens
from rtinfer.model.sequence import instruction_prefix, observation_segment

pytest.importorskip("onnxruntime")


@pytest.fixture
def runner(tiny_model_dir):
    from rtinfer.inference.runner import TokenRunner

    r = TokenRunner(ModelDir.load(tiny_model_dir), drafter="none")
    calls = []
    real = r.backend.step
    r.backend.step = lambda tokens, pos, depth=None: (
        calls.append((len(tokens), depth)),
        real(tokens, pos, depth),
    )[1]
    return r, calls


def _obs():
    return ObsTokens(TINY_SPEC).encode(random_obs_body(np.random.default_rng(3)))


@pytest.mark.parametrize("depth", [1, 2])
def test_an_exit_level_prefills_at_its_own_depth(runner, depth):
    r, calls = runner
    instr, obs = _obs()
    r.run(instr, obs, None, BudgetLevel(depth, 0, 2))
    seg = len(observation_segment(r.model.vocab, obs))
    assert (seg, depth) in calls and (seg, 3) not in calls
    assert all(d == depth for n, d in calls if n == 1)  # and decodes there


def test_full_depth_and_speculating_levels_prefill_at_full_depth(runner):
    r, calls = runner
    instr, obs = _obs()
    seg = len(observation_segment(r.model.vocab, obs))
    r.run(instr, obs, None, BudgetLevel(3, 0, 2))
    r.run(instr, obs, None, BudgetLevel(2, 3, 2))  # speculating: the verify needs every layer
    assert [c for c in calls if c[0] == seg] == [(seg, 3), (seg, 3)]


def test_the_exit_prefill_graph_equals_the_exit_depth_one_token_at_a_time(tiny_model_dir):
    from rtinfer.inference.backends import get_backend

    md = ModelDir.load(tiny_model_dir)
    instr, obs = _obs()
    head = instruction_prefix(md.vocab, instr)
    seg = observation_segment(md.vocab, obs)
    be = get_backend("onnx").load(md)
    be.prefill(head, 0)
    one_pass = be.prefill(seg, len(head), depth=1).copy()
    be.prefill(head, 0)
    for i, _tok in enumerate(seg):
        step = be.step(seg[i : i + 1], len(head) + i, depth=1)
    assert np.allclose(one_pass, step[-1], atol=1e-4)
    assert be.has_graph(1, len(seg)) and not be.has_graph(1, len(seg) + 1)
