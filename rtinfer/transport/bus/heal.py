"""Healing a connecting socket after libzmq ends a session for good.

libzmq never reconnects an endpoint after a protocol error: a CURVE client's handshake
with a peer of another mechanism (a plaintext server that bound the endpoint, even once),
or a frame over ZMQ_MAXMSGSIZE (plaintext or CURVE, ipc or tcp). A connecting socket
therefore watches its sessions (a monitor socket) and `Healer.heal` reconnects such an
endpoint, counted in `reconnects` (failed attempts in `heal_errors`). `sessions_ended`
counts the sessions among them that libzmq ended after their handshake: in practice a
frame over the hard cap. A bound socket has nothing to heal: its connecting peers
reconnect themselves. Not thread-safe: the socket's owner calls it.
"""
from __future__ import annotations

import itertools

import zmq
from zmq import zmq_poll
from zmq.utils.monitor import recv_monitor_message

from rtinfer.transport.curve import CurveConfig, secure_endpoint

HEAL_EVERY_NS = 100_000_000  # how often a connecting socket looks for a dead endpoint
REFUSED_RETRY_NS = 1_000_000_000  # a client the server's allow-list refused tries again at
REFUSED_FIRST_NS = 100_000_000    # least this often: first after this, then twice as long
SILENT_NS = 1_000_000_000  # reconnected, and no handshake outcome since: connect it again
_OUTCOME = (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_AUTH,
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
_POLLIN = int(zmq.POLLIN)
# What a connecting socket's monitor reports (see Healer.heal).
_WATCH = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
          | zmq.EVENT_HANDSHAKE_SUCCEEDED
          | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED)
_monitor_ids = itertools.count()  # inproc monitor names, unique in the process


class Healer:
    """Watches the sessions of `sock` (connecting) and reconnects the endpoints libzmq gave
    up on. `security` maps each connected endpoint to its CURVE (None: NULL); the socket
    fills it as it connects."""

    def __init__(self, sock: zmq.Socket, ctx: zmq.Context) -> None:
        self._sock = sock
        self.security: dict[str, CurveConfig | None] = {}
        self.reconnects = self.heal_errors = self.sessions_ended = self.refusals = 0
        self._next_heal = 0
        self._up: set[str] = set()  # endpoints whose session is past its handshake
        self._ended: dict[str, int] = {}  # endpoint -> heal pass that saw its session end
        self._refused: dict[str, int] = {}  # endpoint -> when the server refused our key
        self._wait: dict[str, int] = {}  # endpoint -> the wait before its next retry (ns)
        self._silent: dict[str, int] = {}  # endpoint -> when we reconnected it, until an outcome
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
        """Reconnect every endpoint libzmq gave up on since the last look (at most every
        HEAL_EVERY_NS).

        Given up on: a handshake that failed on a protocol error, or a session that ended
        (DISCONNECTED) with no CONNECT_RETRIED by the next look: libzmq follows a lost
        connection with a retry at once, and a protocol error with nothing. A handshake the
        server refused (its allow-list: HANDSHAKE_FAILED_AUTH, which libzmq never retries
        either) is tried again REFUSED_FIRST_NS later, then after twice as long each time it
        is refused again, up to every REFUSED_RETRY_NS, so a key added there is admitted
        without restarting this side, soon after a move (a fleet's controller writes the key
        as the robot is placed: the first refusal is the race with that) and at one
        handshake a second for a key that never comes; counted in `refusals`. An endpoint we
        reconnected that reaches no handshake outcome (succeeded, refused, protocol error)
        within SILENT_NS is reconnected again: libzmq (4.3.5) can drop a connect that follows
        the disconnect of the same endpoint at once, silently (at most one CONNECT_RETRIED,
        then nothing), and that server was never heard from again: a fleet's robot on three
        nodes of one port, the node it was moved to restarted (half the runs of
        tests/test_curve.py's restart case).
        """
        if now < self._next_heal:
            return
        self._next_heal = now + HEAL_EVERY_NS
        failed, up, ended = set(), self._up, self._ended
        while zmq_poll([(self._mon, _POLLIN)], 0):
            msg = recv_monitor_message(self._mon)
            event, ep = msg["event"], self._known(msg["endpoint"].decode())
            if event in _OUTCOME:
                self._silent.pop(ep, None)
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                up.add(ep)
                self._wait.pop(ep, None)
            elif event == zmq.EVENT_DISCONNECTED:
                if ep in up:  # a session ended (not a handshake that failed)
                    up.discard(ep)
                    ended.setdefault(ep, now)
            elif event == zmq.EVENT_CONNECT_RETRIED:
                ended.pop(ep, None)  # libzmq reconnects this one itself
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.refusals += 1
                if ep not in self._refused:
                    self._refused[ep] = now
                    self._wait[ep] = min(2 * self._wait.get(ep, REFUSED_FIRST_NS // 2),
                                         REFUSED_RETRY_NS)
            else:
                failed.add(ep)  # HANDSHAKE_FAILED_PROTOCOL
        for ep in [ep for ep, seen in self._refused.items() if now - seen >= self._wait[ep]]:
            del self._refused[ep]
            failed.add(ep)
        for ep in [ep for ep, t in self._silent.items() if now - t >= SILENT_NS]:
            del self._silent[ep]
            failed.add(ep)
        for ep in [ep for ep, seen in ended.items() if seen < now]:  # no retry since a look ago
            del ended[ep]
            self.sessions_ended += 1
            failed.add(ep)
        for ep in failed:
            # an endpoint libzmq names otherwise than we did (a resolved host): all of them
            # but those whose session is up (a robot's one socket on several nodes of one
            # port: reconnecting its working streams on an ambiguous name risked each of
            # them to libzmq's silent drop)
            for known in ([ep] if ep in self.security else
                          [k for k in self.security if k not in up]):
                self._reconnect(known)
                self._silent[known] = now

    def _reconnect(self, endpoint: str) -> None:
        try:
            self._sock.disconnect(endpoint)
        except zmq.ZMQError:
            pass  # libzmq dropped it already: connecting again is what matters
        try:
            secure_endpoint(self._sock, self.security[endpoint], server=False)
            self._sock.connect(endpoint)
            self.reconnects += 1
        except zmq.ZMQError:
            self.heal_errors += 1

    def _known(self, ep: str) -> str:
        """Our name for an endpoint libzmq names ``ep``: some of its events name a tcp host
        as resolved (tcp://localhost:5 -> tcp://127.0.0.1:5), so an unknown name maps to the
        one connected tcp endpoint of that port, if there is one; else it stays as it is."""
        if ep in self.security or not ep.startswith("tcp://"):
            return ep
        port = ep.rpartition(":")[2]
        same = [k for k in self.security if k.startswith("tcp://") and k.rpartition(":")[2] == port]
        return same[0] if len(same) == 1 else ep

    def close(self) -> None:
        """Stop monitoring and close the monitor socket (before the socket closes)."""
        try:
            self._sock.monitor(None, 0)
        except zmq.ZMQError:
            pass
        finally:
            self._mon.close(linger=0)
