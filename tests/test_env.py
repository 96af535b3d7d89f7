"""ConveyorSortEnv: spaces, lockstep timing, determinism, wire body and observation tokens."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mujoco")
pytest.importorskip("gymnasium")

from examples.conveyor_sorting.config import CellConfig, EnvConfig  # noqa: E402
from examples.conveyor_sorting.env import ConveyorSortEnv  # noqa: E402
from examples.conveyor_sorting.obs_tokens import ObsTokenizer, ObsTokenizerConfig  # noqa: E402
from examples.conveyor_sorting.observe import instruction_id, obs_body, obs_from_body  # noqa: E402
from rtinfer.transport import wire  # noqa: E402


def _hover(env, t: int) -> np.ndarray:
    """A fixed, seed-independent action sequence that moves the gantry about."""
    x = -0.2 + 0.3 * np.sin(0.1 * t)
    return np.tile([x, 0.1, 0.45, float(t % 20 > 10)], (env.tokenizer_cfg.horizon, 1))


def _rollout(seed: int, steps: int = 60):
    env = ConveyorSortEnv()
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for t in range(steps):
        obs, *_ = env.step(_hover(env, t))
        out.append(obs)
    return out


def test_reset_and_step_observations_are_in_the_observation_space():
    env = ConveyorSortEnv()
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, done, truncated, info = env.step(_hover(env, 0))
    assert env.observation_space.contains(obs)
    assert env.action_space.shape == (4, 4)
    assert isinstance(reward, float) and not done and not truncated
    assert {"correct", "wrong", "missed", "dropped", "spawned"} <= set(info)


def test_one_step_advances_one_waypoint_period_of_physics():
    env = ConveyorSortEnv()
    env.reset(seed=0)
    assert env.steps_per_action == 50
    env.step(_hover(env, 0))
    assert env.cell.t_ns == env.tokenizer_cfg.period_ns


def test_same_seed_gives_identical_observations():
    a, b = _rollout(7), _rollout(7)
    for oa, ob in zip(a, b):
        for k in oa:
            np.testing.assert_array_equal(oa[k], ob[k])


def test_different_seeds_give_different_observations():
    a, b = _rollout(1, 40), _rollout(2, 40)
    assert any(not np.array_equal(oa["objects"], ob["objects"]) for oa, ob in zip(a, b))


def test_visible_objects_are_listed_most_downstream_first():
    env = ConveyorSortEnv()
    obs, _ = env.reset(seed=0)
    for t in range(120):
        obs, *_ = env.step(_hover(env, t))
    rows = obs["objects"][obs["objects"][:, 3] > 0]
    assert len(rows) >= 2
    assert (np.diff(rows[:, 1]) < 0).all()


def test_missed_objects_cost_reward_and_end_the_episode():
    env = ConveyorSortEnv(replace(EnvConfig(), episode_objects=2))
    env.reset(seed=0)
    total, done = 0.0, False
    for _t in range(400):
        _, r, done, truncated, info = env.step(_hover(env, 0) * [1, 1, 1, 0])
        total += r
        if done:
            break
    assert done and info["missed"] == 2 and total == -2.0


def test_latency_keeps_the_previous_chunk_until_it_elapses():
    env = ConveyorSortEnv(replace(EnvConfig(), latency_ms=20))
    env.reset(seed=0)
    assert env.step(_hover(env, 0))[0]["gantry"].shape == (8,)


def test_obs_body_round_trips_through_the_wire():
    env = ConveyorSortEnv()
    obs, _ = env.reset(seed=0)
    for t in range(30):
        obs, *_ = env.step(_hover(env, t))
    env_ = wire.decode(wire.encode("obs", obs_body(obs), seq=1, src="sim"))
    back = obs_from_body(env_.body)
    for k in obs:
        np.testing.assert_array_equal(back[k], obs[k])
    assert env_.body["ints"]["instruction_id"] == instruction_id(obs["instruction"])


def test_instruction_id_numbers_permutations_densely():
    from itertools import permutations

    ids = [instruction_id(np.array(p)) for p in permutations(range(3))]
    assert sorted(ids) == list(range(6))


_TOK = ObsTokenizer(ObsTokenizerConfig.for_cell(CellConfig()))
_f = st.floats(-5, 5, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    gantry=st.lists(_f, min_size=8, max_size=8),
    held=st.integers(-1, 2),
    rows=st.lists(st.tuples(st.integers(0, 2), _f, _f, st.booleans()), max_size=6),
)
def test_obs_tokens_have_fixed_length_and_stay_in_vocabulary(gantry, held, rows):
    objects = np.zeros((6, 4), np.float32)
    for i, (c, x, y, valid) in enumerate(rows):
        objects[i] = (c, x, y, float(valid))
    tokens = _TOK.encode(
        {"objects": objects, "gantry": np.float32(gantry), "held": np.float32([held])}
    )
    cfg = _TOK.cfg
    assert tokens.shape == (cfg.length,) and tokens.dtype == np.int32
    assert (tokens >= 0).all() and (tokens < cfg.bins).all()
    assert tokens[8] == (held if held >= 0 else cfg.empty)
    cls = tokens[9:].reshape(6, 3)[:, 0]
    valid = np.array([r[3] for r in rows] + [False] * (6 - len(rows)))
    assert (cls[~valid] == cfg.empty).all() and (cls[valid] < cfg.num_classes).all()


def test_obs_tokens_are_monotone_in_position():
    base = {
        "objects": np.zeros((6, 4), np.float32),
        "gantry": np.zeros(8, np.float32),
        "held": np.float32([-1]),
    }
    xs = np.linspace(-0.7, 0.65, 50)
    toks = []
    for x in xs:
        g = base["gantry"].copy()
        g[0] = x
        toks.append(_TOK.encode({**base, "gantry": g})[0])
    assert (np.diff(toks) >= 0).all() and toks[0] == 0 and toks[-1] == _TOK.cfg.bins - 1


def test_rtinfer_obs_tokens_spec_tokenizes_wire_bodies_identically():
    rt = pytest.importorskip("rtinfer.model.obs_tokens")
    node_side = rt.ObsTokens(_TOK.cfg.spec())
    env = ConveyorSortEnv()
    obs, _ = env.reset(seed=4)
    for t in range(80):
        obs, *_ = env.step(_hover(env, t))
        body = wire.decode(wire.encode("obs", obs_body(obs), seq=t, src="sim")).body
        instr, tokens = node_side.encode(body)
        np.testing.assert_array_equal(tokens, _TOK.encode(obs))
        np.testing.assert_array_equal(instr, _TOK.instruction_tokens(obs["instruction"]))


@settings(max_examples=60, deadline=None)
@given(
    gantry=st.lists(_f, min_size=8, max_size=8),
    held=st.integers(-1, 4),
    rows=st.lists(st.tuples(st.integers(-1, 4), _f, _f, st.booleans()), max_size=6),
)
def test_rtinfer_obs_tokens_agree_on_arbitrary_observations(gantry, held, rows):
    rt = pytest.importorskip("rtinfer.model.obs_tokens")
    objects = np.zeros((6, 4), np.float32)
    for i, (c, x, y, valid) in enumerate(rows):
        objects[i] = (c, x, y, float(valid))
    obs = {
        "objects": objects,
        "gantry": np.float32(gantry),
        "held": np.float32([held]),
        "instruction": np.int32([1, 2, 0]),
    }
    _, tokens = rt.ObsTokens(_TOK.cfg.spec()).encode(obs_body(obs))
    np.testing.assert_array_equal(tokens, _TOK.encode(obs))
