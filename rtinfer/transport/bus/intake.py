"""Taking messages off a Subscriber's sockets: one message (framing, topic, decode and
validation, age, stamp, counters, peer), and draining for the newest per topic. Each
message dropped is counted in exactly one counter.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final

import zmq

from rtinfer.transport.bus.peers import client_of
from rtinfer.transport.bus.sockets import NOBLOCK as _NOBLOCK
from rtinfer.transport.bus.topics import dest_ok, parse_addressed
from rtinfer.transport.wire import (
    Envelope,
    OversizeError,
    WireError,
    decode,
    decode_frames,
    now_ns,
)


class _Empty(enum.Enum):
    """EMPTY's type: an enum member, so that ``is EMPTY`` tells it from an Envelope."""
    EMPTY = 0


EMPTY: Final = _Empty.EMPTY  # sentinel: nothing queued on the socket
Taken = Envelope | _Empty | None  # a taker's result: a message, EMPTY, or None (dropped)


class Intake:
    """The receiving half of rtinfer.transport.bus.Subscriber, which sets up the fields."""

    # What taking one message reads and counts (Subscriber.__init__ sets them).
    topics: tuple[str, ...]
    counters: dict[str, int]
    peer: str | None
    max_age_ns: int | None
    _to: dict[str, str]
    _by_bytes: dict[bytes, str]
    _max_bytes: int
    _count_key: dict[str, str]
    _last: dict[str, Envelope]
    _say: Callable[..., None] | None
    _user_id: bool
    _peer_of: dict[zmq.Socket, str | None]
    # What draining reads. A poll item's object is a zmq.Socket or a shm_intake.ShmLeg
    # (Any: zmq_poll's stubs know only sockets, and it is only given sockets); each has a
    # taker (one message off it) and a queued check (anything left on it).
    _pending: dict[str, Envelope]
    _pending_peers: dict[str, str | None]
    _poll_items: list[tuple[Any, int]]
    _poll: Callable[[list[tuple[Any, int]], int], list[tuple[Any, int]]]
    _takers: dict[Any, Callable[[], Taken]]
    _queued: dict[Any, Callable[[], object]]
    _drain_limit: int

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

    def _take(self, sock: zmq.Socket) -> Taken:
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

    def _admit(self, topic_b: bytes, views: list) -> Envelope | None:
        """One message's topic frame and [envelope, *array frames]: Envelope or None (counted)."""
        topic = self._by_bytes.get(topic_b)
        dest: str | None = None
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
            self._refuse(str(e))
            return None
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
