"""ChunkAssembler alone: waypoints of one cycle join a chunk in any order; a new cycle
replaces the old one; what does not fit is rejected under the counter it belongs to."""

import numpy as np

from controllers.assembler import ChunkAssembler

MS = 1_000_000
PERIOD = 50 * MS


def waypoint(i: int) -> np.ndarray:
    return np.full(4, float(i))


def add(
    chunk, i, *, count=4, cycle=1, capture=1_000 * MS, src="policy", period=PERIOD, stamps=None
):
    return chunk.add(src, cycle, capture, i, count, period, waypoint(i), stamps)


def test_waypoints_assembled_out_of_order_become_ready_as_a_prefix():
    chunk = ChunkAssembler(horizon=8, dim=4)
    assert add(chunk, 2) is None and chunk.ready == 0  # waypoint 0 missing: nothing to track
    assert add(chunk, 0) is None and chunk.ready == 1
    assert add(chunk, 1) is None and chunk.ready == 3 and not chunk.complete
    assert add(chunk, 3) is None and chunk.ready == 4 and chunk.complete
    assert chunk.received == 4 and chunk.count == 4 and chunk.cycle == 1
    assert np.array_equal(chunk.waypoints[:4], [waypoint(i) for i in range(4)])


def test_a_new_cycle_replaces_the_chunk_held():
    chunk = ChunkAssembler(horizon=8, dim=4)
    first = {"capture": 1_000 * MS}
    add(chunk, 0, stamps=first)
    add(chunk, 1)
    chunk.applied = 2
    later = {"capture": 1_050 * MS}
    assert add(chunk, 1, cycle=2, capture=1_050 * MS, count=3, stamps=later) is None
    assert chunk.key == ("policy", 2, 1_050 * MS) and chunk.capture_ns == 1_050 * MS
    assert chunk.received == 1 and chunk.ready == 0 and chunk.applied == 0
    assert chunk.count == 3 and chunk.stamps is later  # the first waypoint's, not a copy


def test_a_restarted_policy_reusing_a_cycle_number_starts_a_new_chunk():
    chunk = ChunkAssembler(horizon=8, dim=4)
    add(chunk, 0)
    assert add(chunk, 0, capture=1_020 * MS) is None  # same cycle id, a later capture
    assert chunk.capture_ns == 1_020 * MS and chunk.received == 1


def test_a_chunk_captured_before_the_one_held_is_rejected_as_stale():
    chunk = ChunkAssembler(horizon=8, dim=4)
    add(chunk, 0, capture=1_000 * MS)
    assert add(chunk, 0, cycle=2, capture=990 * MS) == "rejected_stale"
    assert chunk.cycle == 1 and chunk.received == 1  # the chunk held is untouched


def test_a_count_or_period_that_disagrees_with_the_cycle_is_rejected_as_bad():
    chunk = ChunkAssembler(horizon=8, dim=4)
    add(chunk, 0, count=4)
    assert add(chunk, 1, count=3) == "rejected_bad"
    assert add(chunk, 1, period=2 * PERIOD) == "rejected_bad"
    assert chunk.received == 1 and chunk.ready == 1


def test_a_repeated_waypoint_is_rejected_as_bad():
    chunk = ChunkAssembler(horizon=8, dim=4)
    add(chunk, 0)
    assert add(chunk, 0) == "rejected_bad" and chunk.received == 1


def test_the_buffers_are_allocated_once():
    chunk = ChunkAssembler(horizon=8, dim=4)
    rows = chunk.waypoints
    for cycle in range(1, 4):
        for i in range(4):
            add(chunk, i, cycle=cycle, capture=cycle * PERIOD)
    assert chunk.waypoints is rows and chunk.horizon == 8
