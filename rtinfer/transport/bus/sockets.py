"""One ZeroMQ socket of the bus: its context, options and CURVE per endpoint, bind or
connect (one endpoint: rtinfer.transport.bus.peers says why), and its periodic care
(healing when connecting, the allow-list watch when a bound CURVE server), shared by
Publisher and Subscriber.

``curve=`` is one CurveConfig for every endpoint of the socket, or a mapping endpoint ->
CurveConfig (unlisted: plaintext), e.g. from curve.curve_configs: a Subscriber connecting
to two CURVE servers needs the public key of each. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import zmq

from rtinfer.transport.bus.heal import Healer
from rtinfer.transport.bus.io_priority import io_thread_options
from rtinfer.transport.bus.ipc import SocketFiles, refuse_live_ipc
from rtinfer.transport.bus.watch import AllowWatch
from rtinfer.transport.curve import (
    CurveConfig,
    acquire_authenticator,
    release_authenticator,
    secure_endpoint,
)

Curve = CurveConfig | Mapping[str, CurveConfig | None] | None
# Plain ints: OR-ing zmq's IntFlag members costs ~0.5 us of Python per message.
NOBLOCK = int(zmq.NOBLOCK)
NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
POLLIN = int(zmq.POLLIN)


def closed(endpoint: str) -> ValueError:
    """The error of a socket used after its close()."""
    return ValueError(f"{endpoint}: the socket was closed (close()); open a new one")


def _summed(name: str) -> property:
    """A counter of the socket: its healer's plus its watch's (0 where neither has it)."""
    return property(
        lambda self: sum(
            getattr(care, name, 0) for care in (self._healer, self._watch) if care is not None
        )
    )


class BusSocket:
    """A socket bound to or connected to `endpoints` (``self.endpoints``: as resolved, a
    tcp://host:* bind names its port). Counters, summed over its care: reconnects,
    heal_errors, sessions_ended, refusals (rtinfer.transport.bus.heal), revocations and
    revoked (rtinfer.transport.bus.watch). ``close`` is idempotent.
    """

    def __init__(
        self,
        kind: int,
        endpoints: Sequence[str],
        *,
        bind: bool,
        hwm: int,
        ctx: zmq.Context | None,
        curve: Curve,
        options: Sequence[tuple[int, int | bytes]] = (),
    ) -> None:
        self._own_ctx = ctx is None
        if ctx is None:  # its I/O thread starts with the first socket: options before it
            ctx = zmq.Context()
            for opt, level in io_thread_options():
                ctx.set(opt, level)
        self._ctx = ctx
        self._sock: zmq.Socket | None = self._ctx.socket(kind)
        self._healer: Healer | None = None  # a connecting socket's
        self._watch: AllowWatch | None = None  # a bound CURVE server's
        self._files = SocketFiles()  # the ipc socket files its binds made
        self._tending = False  # set below: either of them
        self.endpoints: list[str] = []
        try:
            self._sock.setsockopt(zmq.LINGER, 0)  # close() never waits for unsent messages
            self._sock.setsockopt(zmq.SNDHWM, hwm)
            self._sock.setsockopt(zmq.RCVHWM, hwm)
            for opt, value in options:  # before bind/connect, so peers see them at handshake
                self._sock.setsockopt(opt, value)
            per_ep = [
                curve if isinstance(curve, CurveConfig) or curve is None else curve.get(ep)
                for ep in endpoints
            ]
            allow = {c.allowed_clients_dir for c in per_ep if c is not None}
            if bind and allow:  # the ZAP handler must run before any client can handshake
                if len(allow) > 1:
                    raise ValueError(f"one socket binds {endpoints} with different allow-lists")
                self._watch = AllowWatch(
                    self._sock, acquire_authenticator(self._ctx, allow.pop()), self._files
                )
            if not bind:  # before it connects: the healer misses no event
                if len(endpoints) != 1:
                    raise ValueError(
                        f"a connecting socket has one endpoint, not {endpoints} "
                        f"(rtinfer.transport.bus.peers says why)"
                    )
                self._healer = Healer(self._sock, self._ctx, endpoints[0], per_ep[0])
            for ep, cfg in zip(endpoints, per_ep):  # pyzmq's errors name the endpoint
                if bind:
                    refuse_live_ipc(ep)
                    secure_endpoint(self._sock, cfg, server=True, any_curve=curve is not None)
                    self._sock.bind(ep)  # LAST_ENDPOINT resolves tcp://host:* to the real port
                    self.endpoints.append(self._sock.get_string(zmq.LAST_ENDPOINT))
                    self._files.note(self.endpoints[-1])
                    if self._watch is not None:
                        self._watch.bound[self.endpoints[-1]] = cfg
                else:
                    secure_endpoint(self._sock, cfg, server=False, any_curve=curve is not None)
                    self._sock.connect(ep)
                    self.endpoints.append(ep)
            self._tending = self._healer is not None or self._watch is not None
        except BaseException:
            self.close()
            raise

    reconnects = _summed("reconnects")
    sessions_lost = _summed("sessions_lost")
    heal_errors = _summed("heal_errors")
    sessions_ended = _summed("sessions_ended")
    refusals = _summed("refusals")
    revocations = _summed("revocations")
    revoked = property(lambda self: list(self._watch.revoked) if self._watch else [])

    @property
    def sock(self) -> zmq.Socket:
        """The zmq socket (ValueError once closed)."""
        if self._sock is None:
            raise closed(" ".join(self.endpoints))
        return self._sock

    def hurry(self) -> None:
        """A connecting socket tries a refused handshake again soon (Healer.hurry)."""
        if self._healer is not None:
            self._healer.hurry()

    @property
    def tending(self) -> bool:
        """Whether it has periodic care (`tend`): connecting (healing) or a bound CURVE
        server (its allow-list watch)."""
        return self._tending

    @property
    def names_clients(self) -> bool:
        """A bound CURVE server: ZAP's User-Id names the client of each message it receives
        (rtinfer.transport.bus.peers.client_of)."""
        return self._watch is not None

    def tend(self, now: int) -> None:
        """The periodic work of a connecting socket (heal) or a CURVE server (watch); does
        nothing where `tending` is false. Each checks its own schedule."""
        if self._healer is not None:
            self._healer.heal(now)
        if self._watch is not None:
            self._watch.watch(now)

    def close(self) -> None:
        """Close the socket at once (LINGER 0, queued messages are discarded) and remove the
        ipc socket files it bound; idempotent."""
        if self._sock is None:
            return
        if self._healer is not None:
            self._healer.close()
        self._sock.close(linger=0)
        self._sock = None
        self._files.remove()
        if self._watch is not None:
            release_authenticator(self._ctx)
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
