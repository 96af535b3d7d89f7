"""The Subscriber's parts on their own: Intake (admitting one message) and Drain (taking
messages off several legs), with real frames and real sockets."""

from __future__ import annotations

import time

import pytest
import zmq

from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.bus.intake import Intake
from rtinfer.transport.wire import encode_frames, now_ns


def frames(topic: str = "heartbeat", sent_ns: int = 0, **stamps) -> list:
    return encode_frames(topic, {"node": "n", "sent_ns": sent_ns}, seq=0, src="a", stamps=stamps)


def test_intake_admits_stamps_and_counts_each_drop_in_exactly_one_counter():
    said = []
    intake = Intake(
        ("heartbeat",), None, 4096, 1_000_000_000, lambda kind, line: said.append((kind, line()))
    )
    before = now_ns()
    env = intake.admit(b"heartbeat", frames(capture=before))
    assert env is not None and env.stamps["recv"] >= before
    assert intake.last("heartbeat") is env
    assert intake.admit(b"heartbeat2", frames()) is None  # shares our prefix only
    assert intake.admit(b"heartbeat", [b"x" * 5000]) is None  # over max_bytes
    assert intake.admit(b"heartbeat", [b"not msgpack"]) is None  # the wire refuses it
    assert intake.admit(b"heartbeat", frames(capture=before - 2_000_000_000)) is None  # too old
    intake.reject()  # a lone frame, as a leg reports it
    assert {k: v for k, v in intake.counters.items() if v} == {
        "received": 1,
        "received.heartbeat": 1,
        "rejected": 3,
        "oversize": 1,
        "dropped_for_age": 1,
    }
    assert [kind for kind, _ in said] == ["rejected"] and "fix its sender" in said[0][1]


def test_intake_refuses_to_address_a_topic_it_does_not_take():
    with pytest.raises(ValueError, match="does not take"):
        Intake(("obs",), {"action_chunk": "r1"}, 4096, None, None)


def test_a_flooding_publisher_does_not_starve_another_leg():
    """Two connected endpoints (two legs): a flood queued on one, one message on the other;
    the other's message is among the first two handed out (the legs take turns)."""
    ctx = zmq.Context()
    try:
        with (
            Publisher("inproc://flood", "flood", ctx=ctx) as flood,
            Publisher("inproc://quiet", "quiet", ctx=ctx) as quiet,
            Subscriber(["inproc://flood", "inproc://quiet"], ["heartbeat"], ctx=ctx) as sub,
        ):
            assert len(sub.legs) == 2
            for pub in (flood, quiet):  # beat the slow joiner on each leg
                deadline = time.monotonic() + 10
                while sub.recv(timeout_ms=20) is None:
                    assert time.monotonic() < deadline
                    pub.publish("heartbeat", {"node": "n", "sent_ns": 0})
            while sub.recv(timeout_ms=50) is not None:
                pass
            for i in range(100):
                flood.publish("heartbeat", {"node": "n", "sent_ns": i})
            quiet.publish("heartbeat", {"node": "n", "sent_ns": 0})
            deadline, srcs = time.monotonic() + 10, []
            while len(srcs) < 2 and time.monotonic() < deadline:
                env = sub.recv(timeout_ms=100)
                if env is not None:
                    srcs.append(env.src)
            assert "quiet" in srcs, srcs
            assert sub.counters["received"] >= 2
    finally:
        ctx.destroy(linger=0)


def test_receiving_keeps_no_memory_per_message():
    """2000 messages through recv, after a warm-up: the Subscriber keeps nothing per message
    (the newest per topic only) and no transient grows with the number taken."""
    import tracemalloc

    ctx = zmq.Context()
    try:
        with (
            Publisher("inproc://mem", "pub", ctx=ctx, hwm=5000) as pub,
            Subscriber("inproc://mem", ["heartbeat"], ctx=ctx, hwm=5000) as sub,
        ):

            def burst(n: int) -> int:
                for i in range(n):
                    pub.publish("heartbeat", {"node": "n", "sent_ns": i})
                got = 0
                while sub.recv(0) is not None:
                    got += 1
                return got

            deadline = time.monotonic() + 10
            while sub.recv(timeout_ms=20) is None:  # the slow joiner
                assert time.monotonic() < deadline
                pub.publish("heartbeat", {"node": "n", "sent_ns": 0})
            assert burst(500) == 500  # warm-up
            tracemalloc.start()
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            got = sum(burst(500) for _ in range(4))
            now, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    finally:
        ctx.destroy(linger=0)
    assert got == 2000
    assert now - base < 8192  # a few bytes a message at most (the counters' ints)
    # one message's objects at a time (~3 KB measured), not a queue of them
    assert peak - base < 16384


def test_a_nodes_injected_clock_stamps_recv_ages_and_the_echo_of_a_ping():
    """Subscriber(clock=) stamps "recv" and judges max_age_ns on the node's clock, and
    HeartbeatResponder(clock=) sends t2 on it: the monitor's (t1, t2) are both the node's."""
    from rtinfer.transport.heartbeat import HeartbeatResponder

    t = [5_000_000_000]
    clock = lambda: t[0]  # noqa: E731
    ctx = zmq.Context()
    try:
        with (
            Publisher("inproc://ping", "monitor", ctx=ctx) as monitor,
            Publisher("inproc://node", "node", ctx=ctx) as node_pub,
            Subscriber(
                "inproc://ping", ["heartbeat"], ctx=ctx, clock=clock, max_age_ns=1_000_000_000
            ) as pings,
            Subscriber("inproc://node", ["heartbeat"], ctx=ctx) as echoes,
        ):
            hb = HeartbeatResponder(node_pub, "node", period_s=0, clock=clock)
            monitor.publish(
                "heartbeat", {"node": "monitor", "sent_ns": 7}, {"capture": 4_500_000_000}
            )
            env = pings.recv(timeout_ms=5000)
            assert env is not None and env.stamps["recv"] == 5_000_000_000
            t[0] += 300
            assert hb.on_ping(env)
            echo = echoes.recv(timeout_ms=5000)
            assert echo is not None
            assert echo.body["sent_ns"] == 5_000_000_300
            assert echo.body["echo"] == {
                "src": "monitor",
                "seq": 0,
                "sent_ns": 7,
                "recv_ns": 5_000_000_000,
            }
            t[0] += 1_000_000_000  # the same capture is now 1.5 s old on the node's clock
            monitor.publish(
                "heartbeat", {"node": "monitor", "sent_ns": 8}, {"capture": 4_500_000_000}
            )
            assert pings.recv(timeout_ms=200) is None
            assert pings.counters["dropped_for_age"] == 1
    finally:
        ctx.destroy(linger=0)
