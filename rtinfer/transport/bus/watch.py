"""The allow-list watch of a bound CURVE server: a revoked key loses its session.

libzmq checks a client's key only at the handshake. So the server re-reads its allow-list
(`AllowWatch.watch`, every WATCH_EVERY_NS) and, when a key was removed, ends every session
on its endpoints (unbind, bind again): each client handshakes anew and the revoked one is
refused; counted in `revocations`, the names in `revoked`. The others reconnect by
themselves (libzmq: ~0.1-0.2 s). Not thread-safe: the socket's owner calls it.
"""

from __future__ import annotations

import time

import zmq

from rtinfer.transport.bus.ipc import SocketFiles
from rtinfer.transport.curve import AllowList, CurveConfig, secure_endpoint
from rtinfer.transport.wire import now_ns

WATCH_EVERY_NS = 1_000_000_000  # how often a CURVE server re-reads its allow-list
REBIND_WAIT_NS = 1_000_000_000  # how long a cut endpoint is tried again (libzmq unbinds async)


class AllowWatch:
    """Watches `allow` for `sock`; `bound` maps each bound endpoint (as resolved) to its
    CURVE, filled by the socket as it binds; `files` learns the ipc files it binds anew."""

    def __init__(self, sock: zmq.Socket, allow: AllowList, files: SocketFiles) -> None:
        self._sock, self._files = sock, files
        self.allow = allow
        self.bound: dict[str, CurveConfig | None] = {}
        self.revocations = self.heal_errors = 0
        self.revoked: list[str] = []
        self._allowed = allow.names  # its keys (-> names) as this socket last saw them
        self._unbound = False  # a cut endpoint could not be bound again yet
        self._next_watch = now_ns() + WATCH_EVERY_NS

    def watch(self, now: int) -> None:
        """Re-read the allow-list (at most every WATCH_EVERY_NS); if a key this socket
        admitted is gone, cut every session."""
        if now < self._next_watch:
            return
        self._next_watch = now + WATCH_EVERY_NS
        self.allow.refresh()
        names = self.allow.names
        gone = [name for key, name in self._allowed.items() if key not in names]
        self._allowed = names
        if gone:
            self.revoked.extend(sorted(gone))
            self.revocations += 1
        if gone or self._unbound:
            self._cut()

    def _cut(self) -> None:
        """Unbind and bind again every endpoint: libzmq ends the sessions accepted there.
        Blocks until each is bound again (~1-2 ms) or REBIND_WAIT_NS; one that is not is
        counted in heal_errors and tried again at the next watch."""
        for ep in self.bound:
            try:
                self._sock.unbind(ep)
            except zmq.ZMQError:
                pass  # not bound (its rebind failed before): bound below
        self._unbound = False
        for ep, cfg in self.bound.items():
            give_up = now_ns() + REBIND_WAIT_NS
            while True:
                try:
                    secure_endpoint(self._sock, cfg, server=True)
                    self._sock.bind(ep)
                    self._files.note(ep)  # libzmq made the ipc file anew
                    break
                except zmq.ZMQError:
                    if now_ns() > give_up:
                        self.heal_errors += 1
                        self._unbound = True
                        break
                    time.sleep(0.001)  # the unbind completes in libzmq's I/O thread
