"""A Subscriber's shm:// endpoints: taking samples (rtinfer.transport.bus.shm), and waiting on
them together with its ZeroMQ sockets.

Waiting: iceoryx2's Python Listener does not expose its file descriptor, so zmq_poll cannot
wait on it. A Subscriber with an shm endpoint waits in an iceoryx2 WaitSet instead, on each
endpoint's Listener and on each ZeroMQ socket's ZMQ_FD (an edge signal: the socket's
ZMQ_EVENTS is read before every wait, and a socket with input is never waited on). The
WaitSet returns on a signal, so Python's handlers (Ctrl-C, SIGTERM) run at once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial

import zmq

from rtinfer.transport.bus.intake import EMPTY, Intake, Taken, left_ms
from rtinfer.transport.bus.shm import HEAD, MAGIC, QUEUE, Service, layout, payload
from rtinfer.transport.wire import now_ns

_POLLIN = int(zmq.POLLIN)


def parse(sample: memoryview) -> tuple[bytes, list[memoryview]] | str:
    """(topic frame, [envelope, *array frames] as views of the sample), or why not."""
    n = len(sample)
    if n < HEAD.size:
        return f"a sample of {n} bytes, shorter than its {HEAD.size}-byte header"
    magic, topic_len, count = HEAD.unpack_from(sample, 0)
    if magic != MAGIC:
        return f"a sample that does not start with {MAGIC!r}: not a message of rtinfer's bus"
    at = HEAD.size + 8 * count
    if count == 0 or at + topic_len > n:
        return (
            f"a truncated sample: {count} frames and a {topic_len}-byte topic do not fit "
            f"its {n} bytes"
        )
    sizes = struct.unpack_from(f"<{count}Q", sample, HEAD.size)
    topic_b = bytes(sample[at : at + topic_len])
    offsets, length = layout(topic_b, sizes)
    if length != n:
        return (
            f"a truncated sample: its header declares {length} bytes, it holds {n}"
            if length > n
            else f"a sample with {n - length} bytes after its last frame"
        )
    return topic_b, [sample[o : o + s] for o, s in zip(offsets, sizes)]


class ShmLeg:
    """One shm endpoint of a Subscriber, admitting through its ``intake``: its iceoryx2
    subscriber and listener, with a ZmqLeg's surface (rtinfer.transport.bus.legs); the
    ``peer`` of its messages is None (one host, no CURVE: nobody to name).

    ``take`` hands the intake each sample's frames as read-only views of the sample; the
    arrays decoded from them keep it alive (so the publisher cannot reuse it), as a ZeroMQ
    frame is kept alive by its arrays. A subscriber holds at most HELD samples at once;
    past that a receive fails, is counted in ``receive_errors`` and told to ``say``, and
    the samples wait in the queue (the oldest pushed out by new ones) until arrays are let
    go; the leg tries again when the next sample arrives.
    """

    peer: str | None = None

    def __init__(self, endpoint: str, hwm: int, intake: Intake) -> None:
        self.endpoint = endpoint
        svc = self._service = Service(endpoint)
        self.iox2 = svc.iox2
        self._sub = svc.samples.subscriber_builder().buffer_size(max(1, min(hwm, QUEUE))).create()
        self.listener = svc.wake.listener_builder().create()
        self._prefixes = intake.prefixes  # the topic frames taken, as libzmq's filter
        self._say, self._refuse, self._admit = intake.say, intake.refuse, intake.admit
        self._receive_error = self.iox2.ReceiveError
        self.receive_errors = 0
        self._stalled = False  # a receive failed: not ready again before a new sample's wake-up

    @property
    def pollable(self) -> ShmLeg:
        """What ShmWait.poll is given for it: itself."""
        return self

    def queued(self) -> bool:
        if self._stalled:
            self.woken()
            if self._stalled:
                return False
        return self._sub.has_samples()

    def woken(self) -> None:
        """Consume the wake-ups that arrived (else the WaitSet returns at once); a new sample
        ends a stall."""
        if self.listener.try_wait():
            self._stalled = False

    def take(self) -> Taken:
        """One message off the endpoint: Envelope, None (refused or not subscribed) or EMPTY."""
        try:
            sample = self._sub.receive()
        except self._receive_error as e:
            self.receive_errors += 1
            self._stalled = True
            if self._say is not None:
                # repr now: the line is built later (if at all), when `e` no longer exists
                error = repr(e)
                self._say(
                    "shm",
                    lambda: (
                        f"{self.endpoint}: a receive failed ({error}; "
                        "ExceedsMaxBorrows: the receiver holds more messages "
                        "than the endpoint lends; copy arrays it keeps)"
                    ),
                )
            return EMPTY
        if sample is None:
            return EMPTY
        raw = payload(sample, sample.header.number_of_elements)
        raw.sample = sample  # every view of it keeps the sample, so its memory stays lent to us
        got = parse(memoryview(raw).cast("B").toreadonly())
        if isinstance(got, str):
            self._refuse(got)
            return None
        topic_b, frames = got
        if not topic_b.startswith(self._prefixes):
            return None  # not subscribed: libzmq's filter would not have delivered it
        return self._admit(topic_b, frames)

    def close(self) -> None:
        if self._sub is not None:
            self.listener.delete()
            self._sub.delete()
            self._sub = None


def _has_input(sock: zmq.Socket) -> bool:
    return bool(sock.get(zmq.EVENTS) & _POLLIN)  # type: ignore[operator]  # ZMQ_EVENTS: an int


class ShmWait:
    """zmq_poll's stand-in for a Subscriber with shm legs: ``poll(items, timeout_ms)`` returns
    the ready items, as zmq_poll does, waiting up to ``timeout_ms`` (<0: forever)."""

    def __init__(self, legs: list[ShmLeg], socks: list[zmq.Socket]) -> None:
        iox2 = legs[0].iox2
        self._ws = (
            iox2.WaitSetBuilder.new()
            .signal_handling_mode(iox2.SignalHandlingMode.Disabled)
            .create(iox2.ServiceType.Ipc)
        )
        self._guards = [self._ws.attach_notification(leg.listener) for leg in legs]
        self._guards += [
            self._ws.attach_notification_fd(iox2.FileDescriptor.non_owning_new(s.get(zmq.FD)))
            for s in socks
        ]
        self._legs = legs
        self._ready: dict[tuple[ShmLeg | zmq.Socket, int], Callable[[], bool]] = {
            (leg, _POLLIN): leg.queued for leg in legs
        }
        self._ready.update({(s, _POLLIN): partial(_has_input, s) for s in socks})
        self._ms = iox2.Duration.from_millis

    def poll(self, items: list, timeout_ms: int) -> list:
        ready_of = self._ready
        ready = [item for item in items if ready_of[item]()]
        if ready or timeout_ms == 0:  # recv(0) on nothing: ~1.5 us more than zmq_poll's
            return ready
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        while True:
            for leg in self._legs:  # consume wake-ups, then look again: none can be missed
                leg.woken()
            ready = [item for item in items if ready_of[item]()]
            if ready:
                return ready
            wait_ms = timeout_ms if deadline is None else left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return ready
            if wait_ms < 0:
                self._ws.wait_and_process()
            else:
                self._ws.wait_and_process_with_timeout(self._ms(wait_ms))

    def close(self) -> None:
        for guard in self._guards:
            guard.delete()
        self._guards = []
        self._ws.delete()
