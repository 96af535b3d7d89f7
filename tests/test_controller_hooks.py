"""The driver hooks for robots that execute trajectories themselves (controllers.hardware:
on_chunk, on_hold): a chunk is handed over once, limited, with its due times, only once it
is complete and committed; never when stale; every hold from tracking is told."""

import time

import numpy as np
import pytest
import zmq
from test_controller_node import LINE, MS, Cell, Plant

from rtinfer.transport.wire import now_ns


class TrajectoryPlant(Plant):
    """The test plant, keeping what the hooks handed it."""

    def __init__(self):
        super().__init__()
        self.chunks, self.holds = [], []

    def on_chunk(self, waypoints, due_ns, now_ns):
        self.chunks.append((waypoints, due_ns))
        self.checked_ns = now_ns

    def on_hold(self, now_ns):
        self.holds.append(now_ns)


@pytest.fixture
def cell():
    ctx = zmq.Context()
    c = Cell(ctx, plant=TrajectoryPlant())
    yield c
    c.close()
    ctx.term()


def test_a_fresh_chunk_is_handed_over_once_limited_with_its_due_times(cell):
    far = [[0.7, 0.0, 0.2]] + LINE[1:]  # x beyond the workspace (0.5): clipped
    sent = cell.send_chunk(far, age_ms=10, suction=1.0, continuous=True)
    capture = cell.t - 10 * MS
    cell.deliver(4)
    cell.run(5)
    [(w, due)] = cell.plant.chunks
    assert w.shape == (4, 4) and w[0, 0] == 0.5 and np.allclose(w[1:, :3], sent[1:, :3])
    assert due.tolist() == [capture + 50 * MS * (i + 1) for i in range(4)]


def test_a_stale_chunk_is_never_handed_over(cell):
    cell.send_chunk(LINE, age_ms=150, continuous=True)
    cell.deliver(4)
    cell.run(5)
    assert cell.node.counters["rejected_stale"] == 4 and cell.plant.chunks == []


def test_a_streamed_chunk_is_handed_over_when_its_last_waypoint_comes(cell):
    cell.send_chunk(LINE, indices=[0, 1], continuous=True)
    cell.deliver(2)
    cell.run(3)
    assert cell.node.reports.e2e.count == 1 and cell.plant.chunks == []  # committed, not complete
    cell.send_chunk(LINE, indices=[2, 3], cycle=cell.cycle, age_ms=13, continuous=True)
    cell.deliver(2)
    assert len(cell.plant.chunks) == 1 and len(cell.plant.chunks[0][0]) == 4


def test_every_hold_from_tracking_is_told_and_a_chunk_after_it_is_handed_over(cell):
    cell.send_chunk(LINE, continuous=True)
    cell.deliver(4)
    cell.run(200)  # the watchdog: no fresh chunk for the period + the deadline
    assert cell.node.state == "hold" and len(cell.plant.holds) == 1
    cell.send_chunk(LINE, continuous=True)
    cell.deliver(4)
    cell.run(2)
    cell.command("safe_hold")
    assert len(cell.plant.chunks) == 2 and len(cell.plant.holds) == 2
    assert cell.node.counters["holds"] == 2


def test_a_chunk_dropped_at_commit_is_never_handed_over():
    """On the real clock: read() takes 45 ms, carrying a 60 ms old chunk past the deadline
    at commit: dropped (late_applies), not handed over."""
    ctx = zmq.Context()
    cell = Cell(ctx, plant=TrajectoryPlant(), clock=now_ns)
    try:
        read = cell.plant.read
        cell.plant.read = lambda: (time.sleep(0.045), read())[1]
        cell.t = now_ns()
        cell.send_chunk(LINE, age_ms=60, continuous=True)
        for _ in range(200):
            cell.node.tick()
            if cell.seen() >= 4:
                break
        for _ in range(3):
            cell.node.tick()
        assert cell.node.counters["late_applies"] == 1 and cell.plant.chunks == []
    finally:
        cell.close()
        ctx.term()


def test_a_chunk_completed_too_late_to_hand_over_is_not_and_the_robot_holds(cell):
    """Waypoints 0-1 commit the chunk; 2-3 arrive within the deadline, but the tick's work
    on the last (30 ms here) carries it past the deadline before the hand-over."""
    cell.send_chunk(LINE, indices=[0, 1], age_ms=10, continuous=True)
    cell.deliver(2)
    cell.run(70)
    set_chunk = cell.node.stack.set_chunk

    def slow_when_complete(*args, **kw):
        if cell.node.chunk.complete:
            cell.t += 30 * MS
        return set_chunk(*args, **kw)

    cell.node.stack.set_chunk = slow_when_complete
    cell.send_chunk(LINE, indices=[2, 3], cycle=cell.cycle, age_ms=80, continuous=True)
    cell.deliver(2)
    c = cell.node.counters
    assert (c["waypoints_accepted"], c["rejected_stale"], c["late_handovers"]) == (4, 0, 1)
    assert cell.plant.chunks == [] and len(cell.plant.holds) == 1
    assert cell.node.state == "hold" and c["holds"] == 1


def test_the_hand_over_says_when_it_found_the_chunk_fresh(cell):
    cell.send_chunk(LINE, age_ms=10, continuous=True)
    cell.deliver(4)  # taken and committed at the cell's time
    assert len(cell.plant.chunks) == 1 and cell.plant.checked_ns == cell.t
