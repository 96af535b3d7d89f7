"""The node side of heartbeats: periodic beats, and echoes of the monitor's pings.

A ping is a `heartbeat` without `echo` from another node (the monitor sends
{node: "monitor", sent_ns: t0} on its control endpoint). The reply goes out on the
node's own publisher, which the monitor subscribes to:

    {node, sent_ns: t2, echo: {src: ping.src, seq: ping.seq, sent_ns: t0, recv_ns: t1}}

t1 is the ping's "recv" stamp and t2 the send time, both on this node's clock. The
monitor turns (t0, t1, t2, t3) into a clock offset (rtinfer.transport.peer_clock.PeerClock).

    hb = HeartbeatResponder(pub, "controller")
    ... every few ms, from the loop that owns pub:
    hb.poll(ping_sub)       # a Subscriber on the control endpoint, topics ["heartbeat"]
    hb.beat(now_ns)         # the node's own liveliness heartbeat, at period_s

Never blocks, never raises for a bad ping (counted). Not thread-safe: call it from the
thread that owns the publisher.
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.transport.wire import Envelope, now_ns


def is_ping(env: Envelope, own_name: str) -> bool:
    """A heartbeat from another node that is not itself an echo."""
    return (
        env.topic == "heartbeat"
        and "echo" not in env.body
        and env.body["node"] != own_name
        and "recv" in env.stamps
    )


class HeartbeatResponder:
    """Answers pings and sends periodic heartbeats on `pub` (an rtinfer.transport.bus.Publisher).

    period_s: period of `beat`; 0 disables periodic beats. clock: the node's monotonic ns
    clock, for an echo's t2 and `beat`'s default time (the ping's t1, its "recv" stamp, is
    the Subscriber's clock: give both the same).
    """

    def __init__(
        self, pub, node: str, *, period_s: float = 1.0, clock: Callable[[], int] = now_ns
    ) -> None:
        self.pub, self.node, self.clock = pub, node, clock
        self.period_ns = int(period_s * 1e9)
        self.counters = {"pings": 0, "echoes": 0, "beats": 0, "ignored": 0, "dropped": 0}
        self._next_beat_ns = 0

    def on_ping(self, env: Envelope) -> bool:
        """Echo one received heartbeat if it is a ping; True if an echo was sent."""
        if not is_ping(env, self.node):
            self.counters["ignored"] += 1
            return False
        self.counters["pings"] += 1
        t2 = self.clock()
        body = {
            "node": self.node,
            "sent_ns": t2,
            "echo": {
                "src": env.src,
                "seq": env.seq,
                "sent_ns": env.body["sent_ns"],
                "recv_ns": min(env.stamps["recv"], t2),
            },
        }
        if not self.pub.publish("heartbeat", body):
            self.counters["dropped"] += 1
            return False
        self.counters["echoes"] += 1
        return True

    def poll(self, sub) -> int:
        """Drain `sub` (a Subscriber whose topics are only ["heartbeat"]); echo the newest
        ping (older queued pings are stale: their round trips would be inflated)."""
        env = sub.poll_latest(0).get("heartbeat")
        return int(env is not None and self.on_ping(env))

    def beat(self, now: int | None = None) -> bool:
        """Send the periodic {node, sent_ns} heartbeat if one is due; True if sent."""
        t = self.clock() if now is None else now
        if self.period_ns <= 0 or t < self._next_beat_ns:
            return False
        self._next_beat_ns = t + self.period_ns
        self.counters["beats"] += 1
        return self.pub.publish("heartbeat", {"node": self.node, "sent_ns": t})


LOCAL_HOSTS = ("127.", "localhost", "[::1]", "::1")


def same_host(endpoint: str) -> bool:
    """True if a peer behind `endpoint` is on this host, so stamps on both ends share one
    clock: ipc://, inproc://, or tcp:// on a loopback address."""
    scheme, _, rest = endpoint.partition("://")
    return scheme in ("ipc", "inproc") or (scheme == "tcp" and rest.startswith(LOCAL_HOSTS))
