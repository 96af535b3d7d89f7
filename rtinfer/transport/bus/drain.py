"""Waiting on a Subscriber's legs and taking what they hold: in arrival order (``next``), or
drained into the newest message per topic (``oldest``, ``newest``; older: superseded).

zmq_poll directly: Poller costs more. With several legs the order rotates after each
message handed out, so one that floods cannot starve the others. With shm legs an iceoryx2
WaitSet waits on all of them (shm_intake.ShmWait). A leg's surface: rtinfer.transport.bus.legs.
Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from zmq import zmq_poll

from rtinfer.transport.bus.intake import EMPTY, Taken, left_ms
from rtinfer.transport.bus.legs import ZmqLeg
from rtinfer.transport.bus.shm_intake import ShmLeg, ShmWait
from rtinfer.transport.bus.sockets import POLLIN as _POLLIN
from rtinfer.transport.wire import Envelope, now_ns


class Leg(Protocol):
    """What Drain needs of a leg (legs.ZmqLeg, shm_intake.ShmLeg)."""

    peer: str | None

    @property
    def pollable(self) -> Any: ...
    def take(self) -> Taken: ...
    def queued(self) -> object: ...


class Drain:
    """Takes messages off the legs (ZeroMQ and shm), at most ``drain_limit`` off one leg in a
    turn (bounds the work of one call under a flood); counts what newer ones replaced in
    ``counters["superseded"]``. ``peer``: who sent what ``next`` or ``oldest`` returned last;
    ``peers``: per topic, for what ``newest`` returned last."""

    def __init__(
        self,
        zmq_legs: Sequence[ZmqLeg],
        shm_legs: Sequence[ShmLeg],
        drain_limit: int,
        counters: dict[str, int],
    ) -> None:
        legs: list[Leg] = [*zmq_legs, *shm_legs]
        # A poll item's object is a zmq.Socket or a ShmLeg (Any: zmq_poll's stubs know only
        # sockets, and it is only given sockets).
        self._items: list[tuple[Any, int]] = [(leg.pollable, _POLLIN) for leg in legs]
        self._leg_of = {leg.pollable: leg for leg in legs}
        self._rotate = len(self._items) > 1
        self._wait: ShmWait | None = None
        self._poll: Callable[[list[tuple[Any, int]], int], list[tuple[Any, int]]] = zmq_poll
        if shm_legs:
            self._wait = ShmWait(list(shm_legs), [leg.pollable for leg in zmq_legs])
            self._poll = self._wait.poll
        self._limit = drain_limit
        self._counters = counters
        self._pending: dict[str, Envelope] = {}  # newest per topic, not yet handed out
        self._pending_peers: dict[str, str | None] = {}
        self.peer: str | None = None
        self.peers: dict[str, str | None] = {}

    def next(self, timeout_ms: int) -> Envelope | None:
        """The next valid message, or None after ``timeout_ms`` (0: don't wait, <0: forever)."""
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        wait_ms, items, leg_of = timeout_ms, self._items, self._leg_of
        # Poll before reading: reading an empty socket raises zmq.Again, which costs ~3x more.
        while True:
            ready = self._poll(items, wait_ms)
            if not ready:
                return None
            for item, _ in ready:
                leg = leg_of[item]
                for _ in range(self._limit):
                    env = leg.take()  # a method call: no bound method made
                    if env is EMPTY:
                        break
                    if env is not None:
                        if self._rotate:
                            items.append(items.pop(0))
                        self.peer = leg.peer
                        return env
            wait_ms = left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return None

    def oldest(self, timeout_ms: int) -> Envelope | None:
        """After draining, the newest message of the topic that has waited longest."""
        self._fill(timeout_ms)
        if not self._pending:
            return None
        topic = next(iter(self._pending))
        self.peer = self._pending_peers.pop(topic)
        return self._pending.pop(topic)

    def newest(self, timeout_ms: int) -> dict[str, Envelope]:
        """After draining, the newest message of each topic (their peers in ``peers``)."""
        self._fill(timeout_ms)
        out, self._pending = self._pending, {}
        self.peers, self._pending_peers = self._pending_peers, {}
        return out

    def _fill(self, timeout_ms: int) -> None:
        """Drain every leg into the newest message per topic (older: superseded), waiting up
        to ``timeout_ms`` only while nothing at all is pending."""
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        pending, peers, items = self._pending, self._pending_peers, self._items
        wait_ms = 0 if pending else timeout_ms
        while True:
            ready = self._poll(items, wait_ms)
            if not ready:
                return
            for item, _ in ready:
                leg = self._leg_of[item]
                for _ in range(self._limit):
                    env = leg.take()
                    if env is EMPTY:
                        break
                    if env is not None:
                        if pending.pop(env.topic, None) is not None:
                            self._counters["superseded"] += 1
                        pending[env.topic] = env  # re-insert: dict order = arrival order of newest
                        peers[env.topic] = leg.peer
                    if not leg.queued():  # drained (cheaper than the Again of an empty read)
                        break
            if pending:
                return
            wait_ms = left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return

    def close(self) -> None:
        """Stop waiting on the legs (their owner closes them)."""
        if self._wait is not None:
            self._wait.close()
            self._wait = None
        self._leg_of = {}
