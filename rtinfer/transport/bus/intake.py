"""Taking messages off a Subscriber's sockets: one message (framing, topic, decode and
validation, age, stamp, counters, peer), and draining for the newest per topic. Each
message dropped is counted in exactly one counter.
"""
from __future__ import annotations

import zmq

from rtinfer.transport.bus.peers import client_of
from rtinfer.transport.bus.sockets import NOBLOCK as _NOBLOCK
from rtinfer.transport.bus.topics import dest_ok, parse_addressed
from rtinfer.transport.wire import OversizeError, WireError, decode, decode_frames, now_ns

EMPTY = object()  # sentinel: nothing queued on the socket


class Intake:
    """The receiving half of rtinfer.transport.bus.Subscriber, which sets up the fields."""

    def _fill(self, timeout_ms: int) -> None:
        """Drain every socket into the newest message per topic (older: superseded),
        waiting up to ``timeout_ms`` only while nothing at all is pending."""
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        pending, peers, items = self._pending, self._pending_peers, self._poll_items
        wait_ms = 0 if pending else timeout_ms
        while True:
            ready = self._poll(items, wait_ms)
            if not ready:
                return
            for sock, _ in ready:
                take, queued = self._takers[sock], self._queued[sock]
                for _ in range(self._drain_limit):
                    env = take()
                    if env is EMPTY:
                        break
                    if env is not None:
                        if pending.pop(env.topic, None) is not None:
                            self.counters["superseded"] += 1
                        pending[env.topic] = env  # re-insert: dict order = arrival order of newest
                        peers[env.topic] = self.peer
                    if not queued():  # drained (cheaper than the Again of an empty read)
                        break
            if pending:
                return
            wait_ms = left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return

    def _take(self, sock: zmq.Socket):
        """One message off ``sock``: Envelope (``peer`` set), None (rejected/too old) or EMPTY."""
        try:
            head = sock.recv(_NOBLOCK, copy=False)
        except zmq.Again:
            return EMPTY
        if not head.more:  # a lone frame: no envelope
            self.counters["rejected"] += 1
            return None
        # The rest of a message is always queued once its first frame is (zmq is atomic).
        # .buffer: zero-copy views; arrays decoded from them keep their frames alive.
        frame = sock.recv(_NOBLOCK, copy=False)
        views = [frame.buffer]
        while frame.more:
            frame = sock.recv(_NOBLOCK, copy=False)
            views.append(frame.buffer)
        env = self._admit(head.bytes, views)
        if env is not None:
            self.peer = client_of(head) if self._user_id else self._peer_of[sock]
        return env

    def _admit(self, topic_b: bytes, views: list):
        """One message's topic frame and [envelope, *array frames]: Envelope or None (counted)."""
        topic, dest = self._by_bytes.get(topic_b), None
        if topic is None:
            topic, dest = parse_addressed(topic_b, self._by_bytes, self._to)
            if topic is None:  # a longer topic that only shares our prefix
                self.counters["rejected"] += 1
                return None
        try:
            if len(views) == 1:
                env = decode(views[0], max_bytes=self._max_bytes, topics=self.topics)
            else:
                env = decode_frames(views, max_bytes=self._max_bytes, topics=self.topics)
        except OversizeError:  # under the hard cap, or libzmq would have ended the session
            self.counters["oversize"] += 1
            return None
        except WireError as e:
            return self._refuse(str(e))
        if env.topic != topic or not dest_ok(env.body, dest):
            self.counters["rejected"] += 1
            return None
        now = now_ns()
        if self.max_age_ns is not None:
            born = env.stamps.get("capture", env.stamps.get("publish"))
            if born is not None and now - born > self.max_age_ns:
                self.counters["dropped_for_age"] += 1
                return None
        env.stamps["recv"] = now
        self.counters["received"] += 1
        self.counters[self._count_key[topic]] += 1
        self._last[topic] = env
        return env

    def _refuse(self, why: str) -> None:
        """Count a message the wire refused, and tell ``say`` why (one rate-limited line)."""
        self.counters["rejected"] += 1
        if self._say is not None:
            self._say("rejected", lambda: f"a message of {'/'.join(self.topics)} refused "
                                          f"by the wire ({why}); fix its sender")


def left_ms(deadline: int | None, timeout_ms: int) -> int:
    """Milliseconds left to wait (-1: forever, 0: time is up), rounded up."""
    if deadline is None:
        return -1 if timeout_ms < 0 else 0
    return max(0, -(-(deadline - now_ns()) // 1_000_000))  # ceil: a sub-ms rest still waits
