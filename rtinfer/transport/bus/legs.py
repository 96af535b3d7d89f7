"""A Subscriber's ZeroMQ sockets ("legs"): taking one message off each, and their care.

A leg of either kind (ZmqLeg here, shm_intake.ShmLeg) has the surface the Subscriber's
Drain needs: ``pollable`` (what its wait is given), ``take()`` (one message, admitted by
the Subscriber's Intake: Envelope, None if dropped, or EMPTY), ``queued()`` (anything left),
``peer`` (who sent what ``take`` returned last) and ``close()``. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import zmq
from zmq import zmq_poll

from rtinfer.transport.bus.heal import HEAL_EVERY_NS
from rtinfer.transport.bus.intake import EMPTY, Intake, Taken
from rtinfer.transport.bus.peers import client_of
from rtinfer.transport.bus.sockets import NOBLOCK as _NOBLOCK
from rtinfer.transport.bus.sockets import POLLIN as _POLLIN
from rtinfer.transport.bus.sockets import BusSocket, Curve


class ZmqLeg(BusSocket):
    """A SUB socket on ``endpoints`` whose messages come from ``peer`` (plan_legs: binding
    with CURVE, ZAP's User-Id names each message's client instead)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        peer: str | None,
        intake: Intake,
        *,
        bind: bool,
        hwm: int,
        ctx: zmq.Context | None,
        curve: Curve,
        options: Sequence[tuple[int, int | bytes]],
    ) -> None:
        super().__init__(
            zmq.SUB, endpoints, bind=bind, hwm=hwm, ctx=ctx, curve=curve, options=options
        )
        self.peer = peer
        self.pollable = self.sock
        self._admit, self._reject = intake.admit, intake.reject
        self._user_id = self.names_clients
        # anything left: zmq_poll with a ready-made item list, cheaper than the Again of an
        # empty read
        self.queued = partial(zmq_poll, [(self.pollable, _POLLIN)], 0)

    def take(self) -> Taken:
        """One message off the socket: Envelope (``peer`` set), None (dropped) or EMPTY."""
        sock = self.pollable
        try:
            head = sock.recv(_NOBLOCK, copy=False)
        except zmq.Again:
            return EMPTY
        if not head.more:  # a lone frame: no envelope
            self._reject()
            return None
        # The rest of a message is always queued once its first frame is (zmq is atomic).
        # .buffer: zero-copy views; arrays decoded from them keep their frames alive.
        frame = sock.recv(_NOBLOCK, copy=False)
        views = [frame.buffer]
        while frame.more:
            frame = sock.recv(_NOBLOCK, copy=False)
            views.append(frame.buffer)
        env = self._admit(head.bytes, views)
        if env is not None and self._user_id:
            self.peer = client_of(head)
        return env


class ZmqLegs:
    """A Subscriber's ZeroMQ legs (``socks``) and their care (`tend`): healing each
    connecting one, the allow-list watch of a bound CURVE one."""

    def __init__(self) -> None:
        self.socks: list[ZmqLeg] = []
        self.tending = False  # any of them has care
        self._next_tend = 0
        self._lost_seen = 0  # sessions_lost when last looked at (tend)

    def add(self, leg: ZmqLeg) -> None:
        self.socks.append(leg)
        self.tending = self.tending or leg.tending

    def per_socket(self) -> dict[str, dict[str, int]]:
        """Per socket (its endpoints, joined by a space): its refusals and reconnects."""
        return {
            " ".join(leg.endpoints): {"refusals": leg.refusals, "reconnects": leg.reconnects}
            for leg in self.socks
        }

    def tend_if_due(self, now: int) -> None:
        """`tend`, at most every HEAL_EVERY_NS."""
        if now >= self._next_tend:
            self.tend(now)

    def tend(self, now: int) -> None:
        """Each socket's care; and when one lost a session it had (its server died, or cut
        its sessions), the others try a refused handshake again soon (Healer.hurry): a
        fleet's robot is being placed on one of them."""
        self._next_tend = now + HEAL_EVERY_NS
        for leg in self.socks:
            leg.tend(now)
        lost = sum(leg.sessions_lost for leg in self.socks)
        if lost != self._lost_seen:
            self._lost_seen = lost
            for leg in self.socks:
                leg.hurry()

    def close(self) -> None:
        for leg in self.socks:
            leg.close()
        self.socks = []
