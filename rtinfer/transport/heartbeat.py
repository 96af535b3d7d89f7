"""The node side of heartbeats: periodic beats, and echoes of the monitor's pings.

A ping is a `heartbeat` without `echo` from another node (the monitor sends
{node: "monitor", sent_ns: t0} on its control endpoint). The reply goes out on the
node's own publisher, which the monitor subscribes to:

    {node, sent_ns: t2, echo: {src: ping.src, seq: ping.seq, sent_ns: t0, recv_ns: t1}}

t1 is the ping's "recv" stamp and t2 the send time, both on this node's clock. The
monitor turns (t0, t1, t2, t3) into a clock offset (rtinfer/monitor/clocksync.py).

    hb = HeartbeatResponder(pub, "controller")
    ... every few ms, from the loop that owns pub:
    hb.poll(ping_sub)       # a Subscriber on the control endpoint, topics ["heartbeat"]
    hb.beat(now_ns)         # the node's own liveliness heartbeat, at period_s

Never blocks, never raises for a bad ping (counted). Not thread-safe: call it from the
thread that owns the publisher.

PeerClock is the node's own view of one peer's clock, from messages it sees cross both
ways (the inference node: the robot's `obs` in, and the robot's `trace` of the node's
waypoint 0 coming back), for a node that must compare the peer's stamps with its own.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from rtinfer.transport.wire import Envelope, now_ns


def is_ping(env: Envelope, own_name: str) -> bool:
    """A heartbeat from another node that is not itself an echo."""
    return (env.topic == "heartbeat" and "echo" not in env.body
            and env.body["node"] != own_name and "recv" in env.stamps)


class HeartbeatResponder:
    """Answers pings and sends periodic heartbeats on `pub` (an rtinfer.transport.bus.Publisher).

    clock: this node's clock, ns. Defaults to the stamp clock (wire.now_ns). Tests pass a
    shifted clock to play a node on another host; the ping's "recv" stamp (taken with
    wire.now_ns) is moved into that clock by the clock's current difference to now_ns.
    period_s: period of `beat`; 0 disables periodic beats.
    """

    def __init__(self, pub, node: str, *, clock: Callable[[], int] = now_ns,
                 period_s: float = 1.0) -> None:
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
        t1 = env.stamps["recv"] + (t2 - now_ns()) if self.clock is not now_ns else env.stamps["recv"]
        body = {"node": self.node, "sent_ns": t2,
                "echo": {"src": env.src, "seq": env.seq, "sent_ns": env.body["sent_ns"],
                         "recv_ns": min(t1, t2)}}
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


class PeerClock:
    """Offset of a peer's clock from this node's (peer - local, ns), bracketed by one-way
    messages that cross both ways. A message takes no negative time, so

        peer -> local, sent at s (peer clock), received at r (local):  offset >= s - r
        local -> peer, sent at s (local clock), received at r (peer):  offset <= r - s

    The tightest bounds of the last `window` messages each way bracket the true offset
    (queueing only widens a bound, so the least delayed message sets it; the bracket's
    width is that pair's round trip). `offset_ns` is the bracket's midpoint, exactly 0
    while the bracket holds 0 (one host, or clocks closer than the round trip can tell:
    stamps are then compared as they are), and None while either side has no message yet
    or the bounds contradict each other (a peer restarted on another host: healed once
    the old messages have left the window). Pure arithmetic, no clock reads; not
    thread-safe.
    """

    def __init__(self, window: int = 32) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._low: deque[int] = deque(maxlen=window)   # s - r of peer -> local messages
        self._high: deque[int] = deque(maxlen=window)  # r - s of local -> peer messages

    def from_peer(self, sent_peer_ns: int, recv_local_ns: int) -> None:
        """A message the peer sent (its clock) and this node received (this clock)."""
        self._low.append(sent_peer_ns - recv_local_ns)

    def to_peer(self, sent_local_ns: int, recv_peer_ns: int) -> None:
        """A message this node sent (this clock) and the peer received (its clock)."""
        self._high.append(recv_peer_ns - sent_local_ns)

    def bounds(self) -> tuple[int, int] | None:
        """(lowest, highest) offset the messages allow (ns), or None before both ways."""
        if not self._low or not self._high:
            return None
        return max(self._low), min(self._high)

    @property
    def offset_ns(self) -> int | None:
        """Peer clock minus this clock (ns): 0 if the bracket holds 0, None if unknown."""
        b = self.bounds()
        if b is None or b[0] > b[1]:
            return None
        lo, hi = b
        return 0 if lo <= 0 <= hi else (lo + hi) // 2

    @property
    def uncertainty_ns(self) -> float:
        """Half the bracket's width: the true offset is within offset_ns ± this (inf if unknown)."""
        b = self.bounds()
        return (b[1] - b[0]) / 2 if b is not None and b[0] <= b[1] else float("inf")
