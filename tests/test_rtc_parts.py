"""Real-time chunking's parts alone: the robot's delay estimate and committed prefix, the
join check, the freshness rule, the action spec's max_committed, the node's intake, the
monitor's miss rule. No sockets, injected times."""

import types

import numpy as np
import pytest

from controllers.assembler import ChunkAssembler
from controllers.rtc import Commitments, DelayEstimate, RtcConfig
from controllers.watchdog import Watchdog
from rtinfer.inference.committed_intake import REFUSED, CommittedIntake
from rtinfer.model.action_spec import ActionSpec
from rtinfer.transport.committed import Committed, committed_body, prefix_hash

MS = 1_000_000
P = 50 * MS


def plan(capture_ns=0, cycle=4, n=4, dim=2) -> ChunkAssembler:
    """A chunk in use: n waypoints of `dim`, waypoint i = (i, 10 i), taken and applied."""
    c = ChunkAssembler(4, dim)
    for i in range(n):
        assert (
            c.add("node", cycle, capture_ns, i, 4, P, np.array([i, 10 * i], float), {}, P) is None
        )
    c.applied = c.ready
    return c


def test_delay_estimate_is_the_percentile_of_the_last_window_and_none_before_one():
    d = DelayEstimate(window=10, percentile=90)
    assert d.estimate_ns() is None
    for ms in range(1, 21):  # the ring keeps 11..20 ms
        d.record(ms * MS)
    assert d.estimate_ns() == 19 * MS
    d.record(-5)  # a clock step: never a negative delay
    assert d.estimate_ns() == 19 * MS


@pytest.mark.parametrize(
    "delay_ms, capture_ms, want",
    [
        (40, 50, None),  # lands before the new chunk's waypoint 0 is due: nothing committed
        (60, 50, (1, 1)),  # waypoint 0 (old waypoint 1) runs first
        (110, 50, (1, 2)),
        (110, 74, (1, 2)),  # 24 ms off the grid: the nearest period
        (110, 76, (2, 2)),
        (400, 50, (1, 3)),  # the plan has 3 left: its end
        (400, 250, None),  # the plan has run out
    ],
)
def test_the_prefix_is_what_runs_before_the_new_chunk_lands(delay_ms, capture_ms, want):
    rtc = Commitments(RtcConfig(margin_ms=0.0), horizon=4, dim=2, max_n=3)
    rtc.delay.record(delay_ms * MS - 1)
    got = rtc.prefix(plan(), True, capture_ms * MS)
    if want is None:
        assert got is None
        return
    start, n = want
    assert (got["chunk"], got["from"], len(got["values"])) == (4, start, n)
    assert got["values"].dtype == np.float32 and got["values"][0].tolist() == [start, 10 * start]
    assert got["start_ns"] == P + start * P  # the old waypoint's due time


def test_no_prefix_while_not_tracking_or_before_a_delay_is_measured_or_past_max_committed():
    rtc = Commitments(RtcConfig(), horizon=4, dim=2, max_n=1)
    assert rtc.prefix(plan(), True, 50 * MS) is None  # no delay measured yet
    rtc.delay.record(300 * MS)
    assert rtc.prefix(plan(), False, 50 * MS) is None  # held: it executes no plan
    assert len(rtc.prefix(plan(), True, 50 * MS)["values"]) == 1  # the policy's maximum


def test_a_chunk_joins_only_the_plan_it_names():
    rtc, c = Commitments(RtcConfig(), 4, 2), plan()
    vals = np.array([[1, 10], [2, 20]], np.float32)
    ok = {"chunk": 4, "from": 1, "n": 2, "hash": prefix_hash(vals)}
    assert rtc.joins(c, True, ok, 50 * MS)
    assert not rtc.joins(c, False, ok, 50 * MS)  # not tracking it
    assert not rtc.joins(c, True, {**ok, "chunk": 5}, 50 * MS)  # another chunk
    assert not rtc.joins(c, True, {**ok, "hash": "0" * 16}, 50 * MS)  # other values
    assert not rtc.joins(c, True, ok, 100 * MS)  # not the aligned waypoints
    assert not rtc.joins(c, True, {**ok, "n": 4}, 50 * MS)  # more than it holds
    assert not rtc.joins(plan(n=2), True, ok, 50 * MS)  # not arrived yet


def test_a_conditioned_chunk_is_fresh_until_its_prefix_runs_out_never_less_than_the_deadline():
    w = Watchdog(deadline_ns=100 * MS)
    assert not w.stale(0, 100 * MS) and w.stale(0, 100 * MS + 1)
    window = P + 2 * P  # two committed waypoints: waypoint 2 is due at capture + 150 ms
    assert not w.stale(0, 149 * MS, window) and w.stale(0, 150 * MS, window)
    assert not w.stale(0, 90 * MS, 20 * MS)  # a short window never shortens the deadline
    rtc = Commitments(RtcConfig(max_ms=120.0), 4, 2)
    body = {"start_ns": P, "period_ns": P, "conditioned": {"n": 2}}
    assert rtc.window_ns(body) == 120 * MS  # bounded by the robot's own max_ms
    assert rtc.window_ns({"start_ns": P, "period_ns": P}) == 0


def test_action_spec_max_committed_is_hashed_only_when_declared():
    base = ActionSpec(("x", "y"), ("m", "m"), (-1, -1), (1, 1), 50, 20 * MS, 0)
    declared = ActionSpec(
        ("x", "y"), ("m", "m"), (-1, -1), (1, 1), 50, 20 * MS, 0, max_committed=40
    )
    assert "max_committed" not in base.to_dict() and base.hash != declared.hash
    assert ActionSpec.from_dict(declared.to_dict()) == declared
    assert ActionSpec.from_dict({**declared.to_dict(), "hash": declared.hash}).max_committed == 40
    assert declared.differences(base) == ["max_committed: None where 40 is expected"]
    with pytest.raises(ValueError, match="max_committed must be an integer in"):
        ActionSpec(("x",), ("m",), (-1,), (1,), 4, P, 0, max_committed=4)


def _env(values, capture=1_000 * MS, start_after=P, seq=9):
    body = {
        "values": {},
        "ints": {},
        "committed": committed_body(3, 1, values, capture + start_after),
    }
    return types.SimpleNamespace(body=body, stamps={"capture": capture}, src="arm", seq=seq)


def test_node_intake_takes_refuses_or_ignores_the_prefix_by_the_policys_declaration():
    lines = []
    say = lambda kind, text, error=True: lines.append(text() if callable(text) else text)  # noqa: E731
    token = types.SimpleNamespace(max_committed=2, period_ns=P, start_ns=P, action_dim=2)
    intake = CommittedIntake(token, say)
    assert lines == []
    two = np.ones((2, 2), np.float32)
    got = intake.take(_env(two))
    assert isinstance(got, Committed) and got.n == 2 and not got.used
    assert got.conditioned() == {"chunk": 3, "from": 1, "n": 2, "hash": prefix_hash(two)}
    assert intake.window_ns(_env(two).body) == 3 * P
    assert intake.take(_env(np.ones((3, 2), np.float32))) is REFUSED
    assert "commits 3 waypoints" in lines[-1] and "not answered" in lines[-1]
    assert intake.window_ns(_env(np.ones((3, 2), np.float32)).body) == 0
    assert intake.take(_env(np.ones((1, 3), np.float32))) is None  # 3 dims, not 2
    assert intake.take(_env(two, start_after=2 * P)) is None  # not waypoint 0's time
    assert intake.counters == {
        "committed_taken": 1,
        "committed_ignored": 0,
        "committed_bad": 2,
        "committed_too_long": 1,
    }
    one_shot = CommittedIntake(types.SimpleNamespace(max_committed=0, period_ns=P, start_ns=0), say)
    assert "cannot condition" in lines[-1]
    assert one_shot.take(_env(two, start_after=0)) is None
    assert one_shot.counters["committed_ignored"] == 1 and one_shot.window_ns(_env(two).body) == 0


def test_the_monitor_holds_a_conditioned_chunk_to_its_window_and_others_to_the_deadline():
    from rtinfer.monitor.report import cycle_counts
    from rtinfer.monitor.stages import past_deadline

    def rec(cycle, e2e_ms, window_ms=None):
        fields = {"e2e_ms": e2e_ms} | ({} if window_ms is None else {"window_ms": window_ms})
        return {
            "node": "ctl",
            "cycle": cycle,
            "stamps": {"capture": 0, "apply": e2e_ms * MS},
            "fields": fields,
        }

    assert not past_deadline(rec(1, 140, 150.0), 140 * MS, 100 * MS)
    assert past_deadline(rec(1, 150, 150.0), 150 * MS, 100 * MS)
    assert past_deadline(rec(1, 140), 140 * MS, 100 * MS)
    assert not past_deadline(rec(1, 90, 50.0), 90 * MS, 100 * MS)
    records = [rec(1, 140, 150.0), rec(2, 140), rec(3, 160, 150.0), rec(4, 60)]
    assert cycle_counts(records, 100 * MS) == {"cycles": 4, "misses": 2}


def test_one_observation_in_flight_until_its_chunk_or_its_time_is_up():
    rtc = Commitments(RtcConfig(), 4, 2)
    assert not rtc.awaiting(0)
    rtc.sent(10 * MS, 160 * MS)
    assert rtc.awaiting(50 * MS)
    rtc.answered(9 * MS)  # another observation's chunk: still awaited
    assert rtc.awaiting(100 * MS) and not rtc.awaiting(160 * MS)  # stale by then anyway
    rtc.answered(10 * MS)
    assert not rtc.awaiting(100 * MS)


def test_a_robot_at_rest_commits_to_staying_there_and_a_chunk_joins_only_while_it_does():
    from rtinfer.transport.committed import REST

    rtc = Commitments(RtcConfig(margin_ms=0.0), horizon=4, dim=2)
    hold = np.array([0.25, -0.5])
    assert rtc.rest_prefix(hold, 1_000 * MS, P, P) is None  # no delay measured yet
    rtc.delay.record(120 * MS)
    got = rtc.rest_prefix(hold, 1_000 * MS, P, P)
    assert (got["chunk"], got["from"], got["start_ns"]) == (REST, 0, 1_000 * MS + P)
    assert got["values"].tolist() == [[0.25, -0.5]] * 2  # due at +50 and +100: before +120
    named = {"chunk": REST, "from": 0, "n": 2, "hash": prefix_hash(got["values"])}
    c = ChunkAssembler(4, 2)
    assert rtc.joins(c, False, named, 1_000 * MS, rest=hold)
    assert not rtc.joins(c, False, named, 1_000 * MS, rest=None)  # moving, or tracking
    assert not rtc.joins(c, False, named, 1_000 * MS, rest=np.array([0.25, -0.49]))  # moved
    assert not rtc.joins(c, False, {**named, "from": 1}, 1_000 * MS, rest=hold)
