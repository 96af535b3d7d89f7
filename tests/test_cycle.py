"""One observation's cycle is one object passed along (Cycle), and the robot's clock as the
node brackets it (PeerClock) for the cycle's slack."""

import numpy as np
import pytest
from conftest import random_obs_body

from rtinfer.inference.budget import BudgetLevel
from rtinfer.inference.cycle import Cycle
from rtinfer.transport.heartbeat import same_host
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import now_ns

S = 1_000_000_000


def test_a_cycle_has_fixed_slots_and_starts_unstamped():
    c = Cycle(7, {"capture": 1}, 1, BudgetLevel(3, 0, 3), 3)
    assert not hasattr(c, "__dict__")
    assert c.first_token_ns == 0 and c.first_publish_ns is None
    with pytest.raises(AttributeError):
        c.other = 1


def test_the_runner_stamps_first_token_on_the_cycle_before_the_first_waypoint(tiny_model_dir):
    from rtinfer.inference.budget import default_levels
    from rtinfer.inference.runner import TokenRunner
    from rtinfer.model.directory import ModelDir

    md = ModelDir.load(tiny_model_dir)
    runner = TokenRunner(md, drafter="none")
    level = default_levels(md, runner.decoder.k_verify)[0]
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(0)))
    t0 = now_ns()
    cycle = Cycle(5, {"capture": t0}, t0, level, level.chunk)
    seen = []
    bins = runner.run_cycle(
        cycle, instr, obs, lambda c, i, b: seen.append((c, i, c.first_token_ns, b.copy()))
    )
    assert [i for _, i, _, _ in seen] == list(range(level.chunk))
    assert all(c is cycle for c, _, _, _ in seen)
    assert t0 < seen[0][2] == cycle.first_token_ns <= now_ns()
    assert np.array_equal(np.concatenate([b for *_, b in seen]), bins)
    assert not hasattr(runner, "first_token_ns")  # no side channel


def test_the_offline_run_decodes_the_same_chunk_as_run_cycle(tiny_model_dir):
    from rtinfer.inference.budget import default_levels
    from rtinfer.inference.runner import TokenRunner
    from rtinfer.model.directory import ModelDir

    md = ModelDir.load(tiny_model_dir)
    a, b = TokenRunner(md, drafter="none"), TokenRunner(md, drafter="none")
    level = default_levels(md, a.decoder.k_verify)[0]
    instr, obs = md.obs.encode(random_obs_body(np.random.default_rng(1)))
    bins, t_first = a.run(instr, obs, 100, level)
    cycle = Cycle(0, {}, 100, level, level.chunk)
    assert np.array_equal(bins.copy(), b.run_cycle(cycle, instr, obs)) and t_first > 0


# --- the robot's clock ------------------------------------------------------------------
def _crossings(clock: PeerClock, offset: int, delays_in, delays_out, t=10 * S) -> None:
    for d_in, d_out in zip(delays_in, delays_out):
        clock.from_peer(t + offset, t + d_in)  # robot stamps its clock, we ours
        clock.to_peer(t, t + d_out + offset)
        t += S // 20


def test_one_clock_is_exactly_zero_offset_whatever_the_delays():
    clock = PeerClock()
    _crossings(clock, 0, [300_000, 90_000, 5_000_000], [2_000_000, 70_000, 400_000])
    assert clock.offset_ns == 0  # stamps are compared as they are, as on one host


def test_a_5_s_offset_is_found_within_half_the_best_round_trip():
    clock = PeerClock()
    _crossings(clock, -5 * S, [800_000, 120_000, 3_000_000], [90_000, 1_500_000, 60_000])
    assert abs(clock.offset_ns + 5 * S) <= clock.uncertainty_ns == (120_000 + 60_000) / 2


def test_the_offset_is_unknown_until_messages_have_crossed_both_ways():
    clock = PeerClock()
    assert clock.offset_ns is None and clock.uncertainty_ns == float("inf")
    clock.from_peer(5 * S, 10 * S)
    assert clock.offset_ns is None
    clock.to_peer(10 * S, 6 * S)
    assert clock.offset_ns is not None


def test_contradicting_bounds_are_unknown_until_they_leave_the_window():
    clock = PeerClock(window=2)
    _crossings(clock, 0, [1000, 1000], [1000, 1000])
    _crossings(clock, 3 * S, [1000], [1000])  # the robot restarted on another host
    assert clock.offset_ns is None
    _crossings(clock, 3 * S, [1000], [1000])
    assert abs(clock.offset_ns - 3 * S) <= 1000


@pytest.mark.parametrize(
    "endpoint, local",
    [
        ("ipc:///tmp/obs", True),
        ("inproc://obs", True),
        ("tcp://127.0.0.1:5555", True),
        ("tcp://localhost:5555", True),
        ("tcp://10.0.0.2:5555", False),
        ("tcp://robot:5555", False),
    ],
)
def test_same_host_is_read_from_the_endpoint(endpoint, local):
    assert same_host(endpoint) is local
