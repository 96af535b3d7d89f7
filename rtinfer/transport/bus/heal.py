"""Healing a connecting socket after libzmq ends a session for good.

libzmq never reconnects an endpoint after a protocol error: a CURVE client's handshake
with a peer of another mechanism (a plaintext server that bound the endpoint, even once),
a handshake the server's allow-list refused, or a frame over ZMQ_MAXMSGSIZE (plaintext or
CURVE, ipc or tcp). A connecting socket (one endpoint: rtinfer.transport.bus.peers says
why) therefore watches its sessions (a monitor socket) and `Healer.heal` connects its
endpoint again, counted in `reconnects` (failed attempts in `heal_errors`).
`sessions_ended` counts the sessions among them that libzmq ended after their handshake:
in practice a frame over the hard cap. A bound socket has nothing to heal: its connecting
peers reconnect themselves. Not thread-safe: the socket's owner calls it.
"""

from __future__ import annotations

import itertools

import zmq
from zmq import zmq_poll
from zmq.utils.monitor import recv_monitor_message

from rtinfer.transport.curve import CurveConfig, secure_endpoint

HEAL_EVERY_NS = 100_000_000  # how often a connecting socket looks for a dead endpoint
REFUSED_RETRY_NS = 1_000_000_000  # a client the server's allow-list refused tries again at
REFUSED_FIRST_NS = 100_000_000  # least this often: first after this, then twice as long
_POLLIN = int(zmq.POLLIN)
# What a connecting socket's monitor reports (see Healer.heal).
_WATCH = (
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_CONNECT_RETRIED
)
_monitor_ids = itertools.count()  # inproc monitor names, unique in the process


class Healer:
    """Watches the sessions of `sock`, connecting to `endpoint` with `security` (its CURVE,
    None: NULL), and connects it again when libzmq gave up on it. Made before the socket
    connects: it misses no event."""

    def __init__(
        self, sock: zmq.Socket, ctx: zmq.Context, endpoint: str, security: CurveConfig | None
    ) -> None:
        self._sock = sock
        self.endpoint, self.security = endpoint, security
        self.reconnects = self.heal_errors = self.sessions_ended = self.refusals = 0
        self.sessions_lost = 0  # sessions that ended after their handshake, for any reason
        self._next_heal = 0
        self._up = False  # its session is past its handshake
        self._ended: int | None = None  # the heal pass that saw its session end
        self._refused: int | None = None  # when the server refused our key
        self._wait = 0  # the wait before the next retry after a refusal (ns)
        self._mon = self._monitor(ctx)

    def _monitor(self, ctx: zmq.Context) -> zmq.Socket:
        """A PAIR socket receiving the socket's _WATCH events. Its RCVHWM is 0: libzmq's
        I/O thread blocks on a full monitor queue (CONNECT_RETRIED arrives every 100 ms
        while a peer is down), and with it every socket of the context."""
        addr = f"inproc://rtinfer.bus.monitor.{next(_monitor_ids)}"
        self._sock.monitor(addr, _WATCH)
        mon = ctx.socket(zmq.PAIR)
        mon.setsockopt(zmq.LINGER, 0)
        mon.setsockopt(zmq.RCVHWM, 0)
        mon.connect(addr)
        return mon

    def heal(self, now: int) -> None:
        """Connect the endpoint again if libzmq gave up on it since the last look (at most
        every HEAL_EVERY_NS).

        Given up on: a handshake that failed on a protocol error, or a session that ended
        (DISCONNECTED) with no CONNECT_RETRIED by the next look: libzmq follows a lost
        connection with a retry at once, and a protocol error with nothing. A handshake the
        server refused (its allow-list: HANDSHAKE_FAILED_AUTH, which libzmq never retries
        either) is tried again REFUSED_FIRST_NS later, then after twice as long each time it
        is refused again, up to every REFUSED_RETRY_NS, so a key added there is admitted
        without restarting this side, soon after a move (a fleet's controller writes the key
        as the robot is placed: the first refusal is the race with that) and at one
        handshake a second for a key that never comes; counted in `refusals`.
        """
        if now < self._next_heal:
            return
        self._next_heal = now + HEAL_EVERY_NS
        failed = False
        while zmq_poll([(self._mon, _POLLIN)], 0):
            event = recv_monitor_message(self._mon)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._up, self._wait = True, 0
            elif event == zmq.EVENT_DISCONNECTED:
                if self._up:  # a session ended (not a handshake that failed)
                    self._up = False
                    self.sessions_lost += 1
                    if self._ended is None:
                        self._ended = now
            elif event == zmq.EVENT_CONNECT_RETRIED:
                self._ended = None  # libzmq reconnects it itself
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.refusals += 1
                if self._refused is None:
                    self._refused = now
                    self._wait = min(
                        2 * self._wait if self._wait else REFUSED_FIRST_NS, REFUSED_RETRY_NS
                    )
            else:
                failed = True  # HANDSHAKE_FAILED_PROTOCOL
        if self._refused is not None and now - self._refused >= self._wait:
            self._refused = None
            failed = True
        if self._ended is not None and self._ended < now:  # no retry since a look ago
            self._ended = None
            self.sessions_ended += 1
            failed = True
        if failed:
            self._reconnect()

    def hurry(self) -> None:
        """Try a refused handshake again at the next look, backing off from REFUSED_FIRST_NS
        anew: a sibling socket lost the session that served its owner (a fleet's robot whose
        node died is placed on another one, the one that refused it so far). A handshake
        still on its way when told is retried REFUSED_FIRST_NS after its refusal."""
        self._wait = 0

    def _reconnect(self) -> None:
        """Disconnect (libzmq forgets the session it ended) and connect again, with the
        endpoint's CURVE options (the socket holds the last connect's)."""
        try:
            self._sock.disconnect(self.endpoint)
        except zmq.ZMQError:
            pass  # libzmq dropped it already: connecting again is what matters
        try:
            secure_endpoint(self._sock, self.security, server=False)
            self._sock.connect(self.endpoint)
            self.reconnects += 1
        except zmq.ZMQError:
            self.heal_errors += 1

    def close(self) -> None:
        """Stop monitoring and close the monitor socket (before the socket closes)."""
        try:
            self._sock.monitor(None, 0)
        except zmq.ZMQError:
            pass
        finally:
            self._mon.close(linger=0)
