"""The bus's publisher: one endpoint, bounded, never blocking (rtinfer.transport.bus)."""

from __future__ import annotations

import time

import zmq

from rtinfer.transport.bus.shm import ShmSender, is_shm, refuse_curve
from rtinfer.transport.bus.sockets import NOBLOCK as _NOBLOCK
from rtinfer.transport.bus.sockets import NOBLOCK_MORE as _NOBLOCK_MORE
from rtinfer.transport.bus.sockets import BusSocket, Curve, closed
from rtinfer.transport.bus.topics import addressed_topic
from rtinfer.transport.wire import encode_frames, now_ns


class Publisher(BusSocket):
    """Publishes envelopes on one endpoint; binds by default.

    ``publish`` never blocks. Note that a PUB socket never blocks anyway: at the high
    water mark libzmq drops the message for that subscriber *silently* and exposes no
    counter, so ``counters["dropped"]`` cannot see those drops (receivers see them as
    seq gaps). It counts what zmq does report: ``zmq.Again``, and a multipart send that
    fails mid-way.

    Arrays of at least ``oob_bytes`` go out-of-band and are sent without copying: do not
    mutate them after ``publish`` (zmq reads them later from its I/O thread).

    An ``shm://NAME`` endpoint makes a ShmPublisher: the same messages in shared memory on
    this host (rtinfer.transport.bus.shm, docs/wire.md), needing the ``rtinfer[shm]`` extra.

    ``listeners=True`` makes it an XPUB: the same sending, and ``heard(topics, timeout_s)``
    says whether subscribers of all those topics have connected (a robot waits for its
    monitor, so the monitor sees its first cycle: PUB/SUB drops what is sent before a
    subscription lands). Call ``forget_listeners`` now and then: libzmq queues each
    subscription for the reader.
    """

    def __new__(cls, endpoint: str, *args, **kwargs):
        if cls is Publisher and is_shm(endpoint):
            cls = ShmPublisher
        return super().__new__(cls)

    def __init__(
        self,
        endpoint: str,
        src: str,
        *,
        bind: bool = True,
        hwm: int = 1000,
        ctx: zmq.Context | None = None,
        curve: Curve = None,
        oob_bytes: int = 65536,
        listeners: bool = False,
    ) -> None:
        kind, opts = (zmq.XPUB, [(zmq.XPUB_VERBOSE, 1)]) if listeners else (zmq.PUB, [])
        super().__init__(kind, [endpoint], bind=bind, hwm=hwm, ctx=ctx, curve=curve, options=opts)
        self._fields(src, oob_bytes, listeners)

    def heard(self, topics: tuple[str, ...], timeout_s: float = 0.0) -> bool:
        """Whether subscribers of every topic in `topics` have connected, waiting up to
        timeout_s for them (a Publisher made with listeners=True; any other says True)."""
        if not self._listeners:
            return True
        want = {t.encode() for t in topics}
        sock = self.sock
        end = time.monotonic() + timeout_s
        self.forget_listeners()
        while not want <= self._heard:
            left_ms = int((end - time.monotonic()) * 1000)
            if left_ms < 0 or not sock.poll(left_ms, zmq.POLLIN):
                return False
            self.forget_listeners()
        return True

    def forget_listeners(self) -> None:
        """Read what subscriptions libzmq queued for us (noting each topic), without
        waiting."""
        if not self._listeners or self._sock is None:
            return
        while True:
            try:
                msg = self._sock.recv(_NOBLOCK)
            except zmq.Again:
                return
            if msg[:1] == b"\x01":
                self._heard.add(bytes(msg[1:]))

    def _fields(self, src: str, oob_bytes: int, listeners: bool = False) -> None:
        self._listeners = listeners
        self._heard: set[bytes] = set()  # topics a subscriber has subscribed to
        self.endpoint = self.endpoints[0]
        self.src = src
        self.counters = {"sent": 0, "dropped": 0}
        self._oob_bytes = oob_bytes
        self._seq = 0
        self._topic_bytes: dict = {}  # topic, or (topic, to) -> its frame
        self._open_multipart = False  # a send failed mid-message; must be terminated first

    def publish(
        self, topic: str, body: dict, stamps: dict | None = None, to: str | None = None
    ) -> bool:
        """Send one message without blocking; True if zmq accepted it.

        Adds stamp "publish" (now_ns) unless present; the caller's dict is not modified.
        seq advances on every call that encodes, so receivers see drops as seq gaps.
        Raises WireError (nothing sent) if the body does not match the topic's schema.
        to: address it to one robot (its body's ``dest``, ValueError otherwise): only that
        robot's ``Subscriber(to=...)`` and the unaddressed Subscribers of the topic receive
        it. Receivers that predate addressed frames reject it (docs/wire.md).
        """
        if to is not None and body.get("dest") != to:
            raise ValueError(
                f"a message addressed to {to!r} must have dest {to!r} in its "
                f"body, not {body.get('dest')!r}"
            )
        st = {} if stamps is None else dict(stamps)
        if "publish" not in st:
            st["publish"] = now_ns()
        if self._tending:
            self.tend(now_ns())
        frames = encode_frames(
            topic, body, seq=self._seq, src=self.src, stamps=st, oob_bytes=self._oob_bytes
        )
        self._seq += 1
        key = topic if to is None else (topic, to)
        topic_b = self._topic_bytes.get(key)
        if topic_b is None:
            topic_b = self._topic_bytes[key] = (
                topic.encode() if to is None else addressed_topic(topic, to)
            )
        if not self._send(topic_b, frames):
            self.counters["dropped"] += 1
            return False
        self.counters["sent"] += 1
        return True

    def _send(self, topic_b: bytes, frames: list) -> bool:
        """The multipart message [topic, *frames]; False if zmq refused part of it."""
        sock = self._sock
        if sock is None:
            raise closed(self.endpoint)
        if self._open_multipart and not self._terminate(sock):
            return False
        try:
            sock.send(topic_b, _NOBLOCK_MORE)
        except zmq.Again:
            return False
        return self._send_rest(sock, frames)

    def _send_rest(self, sock: zmq.Socket, frames: list) -> bool:
        """The frames after the topic; big ones zero-copy. False if zmq refused one."""
        last = len(frames)
        try:
            if last == 1:  # the common case: one envelope frame, no out-of-band arrays
                sock.send(frames[0], _NOBLOCK, copy=len(frames[0]) < self._oob_bytes)
                return True
            for i, frame in enumerate(frames, 1):
                size = frame.nbytes if isinstance(frame, memoryview) else len(frame)
                sock.send(
                    frame, _NOBLOCK_MORE if i < last else _NOBLOCK, copy=size < self._oob_bytes
                )
        except zmq.Again:
            self._open_multipart = True
            self._terminate(sock)
            return False
        return True

    def _terminate(self, sock: zmq.Socket) -> bool:
        """End a half-sent message with an empty last frame.

        zmq cannot abort a started multipart message; unterminated, the next message
        would be glued onto it. Receivers reject the truncated message (WireError).
        """
        try:
            sock.send(b"", _NOBLOCK)
        except zmq.Again:
            return False
        self._open_multipart = False
        return True


class ShmPublisher(Publisher):
    """A Publisher on ``shm://NAME`` (``Publisher(endpoint, ...)`` makes one): each message is
    one iceoryx2 sample, its arrays copied once into it (rtinfer.transport.bus.shm). Never
    blocks: a subscriber's queue (shm.QUEUE) loses its oldest message to a new one, seen as
    a seq gap; ``dropped`` counts the messages no sample could be loaned for. bind=True (the
    default) refuses a name another live publisher is on (EndpointInUse, as for ipc);
    bind=False shares it. hwm and ctx mean nothing here; curve is refused (one host).
    """

    def __init__(
        self,
        endpoint: str,
        src: str,
        *,
        bind: bool = True,
        hwm: int = 1000,
        ctx: zmq.Context | None = None,
        curve: Curve = None,
        oob_bytes: int = 65536,
    ) -> None:
        refuse_curve(endpoint, curve)
        self._sock = self._healer = self._watch = None  # BusSocket's: no zmq socket here
        self._tending = False
        self.endpoints = [endpoint]
        self._sender: ShmSender | None = ShmSender(endpoint, alone=bind)
        self._fields(src, oob_bytes)

    def _send(self, topic_b: bytes, frames: list) -> bool:
        if self._sender is None:
            raise closed(self.endpoint)
        return self._sender.send(topic_b, frames)

    def close(self) -> None:
        """Let go of the service at once: subscribers lose what they have not received yet
        and keep the messages they hold; idempotent."""
        if self._sender is not None:
            self._sender.close()
            self._sender = None
