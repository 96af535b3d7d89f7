"""The nodes' parts alone, on their own clocks (times passed in): the inference node's health
timing and broken-policy count, the controller's reports and its driver calls."""

import numpy as np
import pytest
import zmq

from controllers.assembler import ChunkAssembler
from controllers.driver_calls import DriverCalls
from controllers.hardware import DriverError, HardwareFault
from controllers.reports import ControllerReports
from rtinfer.inference.control_intake import ControlIntake
from rtinfer.inference.node_health import BROKEN_AFTER, NodeHealth
from rtinfer.realtime.node_state import State
from rtinfer.transport.bus import Publisher, Subscriber

MS = 1_000_000


def test_health_is_due_once_per_period_on_the_clock_it_is_given():
    h = NodeHealth("infer", health_hz=10.0)
    assert h.due(5 * MS) and not h.due(5 * MS + 99 * MS)
    assert h.due(105 * MS) and not h.due(204 * MS) and h.due(205 * MS)


def test_the_policy_is_broken_after_so_many_dropped_chunks_in_a_row_and_mends_on_one_sent():
    h = NodeHealth("infer", health_hz=10.0)
    verdicts = [h.record(0, 1 * MS, 3 * MS, 3, dropped=True) for _ in range(BROKEN_AFTER)]
    assert verdicts == [False] * (BROKEN_AFTER - 1) + [True] and h.broken
    assert not h.record(0, 1 * MS, 3 * MS, 3, dropped=False) and not h.broken
    body = h.body(State.RUN, {"waypoints": 9}, {})
    assert body["state"] == "run" and body["counters"]["cycles"] == BROKEN_AFTER + 1
    assert body["counters"]["policy_broken"] == 0 and body["counters"]["waypoints"] == 9
    assert body["gauges"]["ttft_p50_us"] > 0


def test_without_a_control_endpoint_nothing_is_asked():
    ctx = zmq.Context()
    pub = Publisher("inproc://parts-ctl", "infer", ctx=ctx)
    try:
        assert ControlIntake(None, pub, "infer", 10.0, ctx=ctx, curve=None, say=print).poll() == (
            None,
            None,
        )
    finally:
        pub.close()


def test_reports_say_an_applied_cycle_and_a_late_one_once_and_health_when_due():
    ctx = zmq.Context()
    pub = Publisher("inproc://parts-reports", "robot", ctx=ctx)
    sub = Subscriber("inproc://parts-reports", ["trace", "health"], ctx=ctx)
    try:
        r = ControllerReports("controller", 10.0, pub)
        chunk = ChunkAssembler(4, 2)
        assert (
            chunk.add(
                "policy", 7, 100 * MS, 0, 4, 50 * MS, np.zeros(2), {"capture": 100 * MS}, 50 * MS, 0
            )
            is None
        )
        pub.publish("trace", {"node": "sync", "cycle": 0, "stamps": {}, "fields": {}})
        assert sub.recv(2000) is not None  # the slow joiner
        assert r.applied(chunk, 130 * MS) == 30 * MS
        assert (r.e2e_last_ns, r.e2e_max_ns, r.e2e.count) == (30 * MS, 30 * MS, 1)
        rec = sub.recv(2000).body
        assert rec["stamps"]["apply"] == 130 * MS and rec["fields"]["e2e_ms"] == 30.0
        r.late(("policy", 8, 200 * MS), {"capture": 200 * MS}, 2)
        assert r.late_key == ("policy", 8, 200 * MS)
        assert sub.recv(2000).body["fields"] == {"late_index": 2.0}
        assert r.due(0) and not r.due(99 * MS) and r.due(100 * MS)
    finally:
        sub.close()
        pub.close()


class _Driver:
    def __init__(self, error):
        self.error = error

    def read(self):
        raise self.error

    def write(self, cmd):
        raise self.error


def test_a_fault_is_a_failed_transfer_and_anything_else_a_driver_bug_naming_the_method():
    faulty = DriverCalls(_Driver(HardwareFault("bus timeout")))
    assert not faulty.write(None) and faulty.observe(None, 0) is None
    with pytest.raises(HardwareFault):
        faulty.read()
    buggy = DriverCalls(_Driver(KeyError("oops")))
    with pytest.raises(DriverError, match=r"_Driver\.write"):
        buggy.write(None)
    with pytest.raises(DriverError, match=r"_Driver\.read"):
        buggy.read()
    assert buggy.last_state is None
