"""ZeroMQ PUB/SUB bus: bounded, non-blocking publish; validated, counted receive.

A message is the multipart ``[topic, *wire.encode_frames(...)]``. Subscription is by
topic prefix inside libzmq, so the subscriber also checks that the topic frame is one of
its topics exactly and equals the envelope's topic ("obs" would otherwise match "obs2").
An *addressed* message (``publish(..., to=ROBOT)``) has the topic frame
``TOPIC NUL ROBOT NUL`` and a body whose ``dest`` is ROBOT: a Subscriber made with
``to={TOPIC: ROBOT}`` subscribes to that frame only, so libzmq filters the other robots'
messages at the publisher; one without ``to`` takes both forms (addressed_topic).

Endpoints: ``ipc://`` on one host, ``tcp://`` across hosts (use CURVE, see keys.py:
``curve=`` is one CurveConfig for all endpoints or a mapping endpoint -> CurveConfig),
``inproc://`` for tests (both ends must share one zmq.Context: pass ``ctx=``).
Neither class is thread-safe: use each from one thread (zmq sockets are not shareable).
"""
from __future__ import annotations

import errno
import itertools
import os
import socket
import time
from typing import Mapping, Sequence, Union

import zmq
from zmq import zmq_poll
from zmq.utils.monitor import recv_monitor_message

from rtinfer.transport.curve import (AllowList, CurveConfig, acquire_authenticator, load_public,
                                     release_authenticator, secure_socket)
from rtinfer.transport.wire import (DEFAULT_MAX_BYTES, Envelope, OversizeError, WireError, decode, decode_frames,
                   encode_frames, now_ns)

_EMPTY = object()  # sentinel: nothing queued on the socket
# Plain ints: OR-ing zmq's IntFlag members costs ~0.5 us of Python per message.
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_POLLIN = int(zmq.POLLIN)

# One config for every endpoint of the socket, or one per endpoint (unlisted: plaintext),
# e.g. from keys.curve_configs: a Subscriber connecting to two CURVE servers needs the
# public key of each.
Curve = Union[CurveConfig, Mapping[str, "CurveConfig | None"], None]
HEAL_EVERY_NS = 100_000_000  # how often a connecting socket looks for a dead endpoint
_HEAL_EVERY_MS = HEAL_EVERY_NS // 1_000_000
WATCH_EVERY_NS = 1_000_000_000  # how often a CURVE server re-reads its allow-list
REBIND_WAIT_NS = 1_000_000_000  # how long a cut endpoint is tried again (libzmq unbinds async)
REFUSED_RETRY_NS = 1_000_000_000  # a client the server's allow-list refused tries again this often
# What a connecting socket's monitor reports (see _BusSocket._heal).
_WATCH = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
          | zmq.EVENT_HANDSHAKE_SUCCEEDED
          | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED)
_monitor_ids = itertools.count()  # inproc monitor names, unique in the process

# A Subscriber's libzmq limit (ZMQ_MAXMSGSIZE, per frame) is a memory guard well above its
# max_bytes: a message over max_bytes still arrives, and rtinfer drops and counts it with
# the session intact. Only a frame over this hard cap makes libzmq end the session.
HARD_CAP_FACTOR = 4
HARD_CAP_FLOOR_BYTES = 65536


def addressed_topic(topic: str, to: str) -> bytes:
    """The topic frame of a message for one receiver: ``TOPIC NUL TO NUL`` (UTF-8). The
    closing NUL keeps a subscription to "cell-1" from matching "cell-10"."""
    return b"%s\x00%s\x00" % (topic.encode(), to.encode())


def hard_cap_bytes(max_bytes: int) -> int:
    """libzmq's per-frame limit for a Subscriber of this max_bytes: 4x it, at least 64 KiB."""
    return max(HARD_CAP_FACTOR * max_bytes, HARD_CAP_FLOOR_BYTES)


class EndpointInUse(OSError):
    """An ipc endpoint another live process has bound. libzmq would take the path over
    silently (it unlinks the socket file and binds anew), cutting the other process off
    from its peers; binding refuses instead."""

    def __str__(self) -> str:
        return self.strerror


def refuse_live_ipc(endpoint: str) -> None:
    """Raise EndpointInUse if `endpoint` is ipc:// and a live process listens on its path
    (a stale socket file, left by a process that died, is not in use)."""
    if not endpoint.startswith("ipc://"):
        return
    path = endpoint[len("ipc://"):]
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(path)
    except OSError:
        return  # nobody listens: a stale file, which the bind replaces
    finally:
        probe.close()
    raise EndpointInUse(errno.EADDRINUSE, f"{endpoint} is bound by another live process; give "
                        "this run its own endpoint, or stop the other run first")


class _BusSocket:
    """Context/socket/CURVE lifecycle shared by Publisher and Subscriber.

    libzmq never reconnects an endpoint after a protocol error: a CURVE client's handshake
    with a peer of another mechanism (a plaintext server that bound the endpoint, even
    once), or a frame over ZMQ_MAXMSGSIZE (plaintext or CURVE, ipc or tcp). A connecting
    socket therefore watches its sessions; `_heal` (on every recv/poll_latest/publish, doing
    work at most every HEAL_EVERY_NS) reconnects such an endpoint, counted in `reconnects`
    (failed attempts in `heal_errors`). `sessions_ended` counts the sessions among them that
    libzmq ended after their handshake: in practice a frame over the hard cap.
    A bound socket has nothing to heal: its connecting peers reconnect themselves.

    A bound CURVE server watches its allow-list instead (`_watch`, every WATCH_EVERY_NS):
    when a key was removed it ends every session on its endpoints (unbind, bind again), so
    each client handshakes anew and the revoked one is refused; counted in `revocations`,
    the names in `revoked`. The others reconnect by themselves (libzmq: ~0.1-0.2 s).
    """

    def __init__(self, kind: int, endpoints: Sequence[str], *, bind: bool, hwm: int,
                 ctx: zmq.Context | None, curve: Curve,
                 options: Sequence[tuple[int, int | bytes]] = ()) -> None:
        self._own_ctx = ctx is None
        self._ctx = zmq.Context() if ctx is None else ctx
        self._auth = False
        self._sock: zmq.Socket | None = self._ctx.socket(kind)
        self._mon: zmq.Socket | None = None
        self._next_heal = 0
        self._tending = False  # set below: a connecting socket or a CURVE server
        self.endpoints: list[str] = []
        self._security: dict[str, CurveConfig | None] = {}  # connected endpoint -> its CURVE
        self._up: set[str] = set()  # endpoints whose session is past its handshake
        self._ended: dict[str, int] = {}  # endpoint -> heal pass that saw its session end
        self.reconnects = self.heal_errors = self.sessions_ended = self.refusals = 0
        self._refused: dict[str, int] = {}  # endpoint -> when the server refused our key
        self._allow: AllowList | None = None  # a bound CURVE server's allow-list
        self._allowed: dict[str, str] = {}  # its keys (-> names) as this socket last saw them
        self._unbound = False  # a cut endpoint could not be bound again yet
        self._bound: dict[str, CurveConfig | None] = {}  # bound endpoint (resolved) -> its CURVE
        self._next_watch = 0
        self.revocations = 0
        self.revoked: list[str] = []
        try:
            self._sock.setsockopt(zmq.LINGER, 0)  # close() never waits for unsent messages
            self._sock.setsockopt(zmq.SNDHWM, hwm)
            self._sock.setsockopt(zmq.RCVHWM, hwm)
            for opt, value in options:  # before bind/connect, so peers see them at handshake
                self._sock.setsockopt(opt, value)
            per_ep = [curve if isinstance(curve, CurveConfig) or curve is None
                      else curve.get(ep) for ep in endpoints]
            allow = {c.allowed_clients_dir for c in per_ep if c is not None}
            if bind and allow:  # the ZAP handler must run before any client can handshake
                if len(allow) > 1:
                    raise ValueError(f"one socket binds {endpoints} with different allow-lists")
                self._allow = acquire_authenticator(self._ctx, allow.pop())
                self._allowed = self._allow.names
                self._next_watch = now_ns() + WATCH_EVERY_NS
                self._auth = True
            if not bind:
                self._mon = self._monitor()
            for ep, cfg in zip(endpoints, per_ep):  # pyzmq's errors name the endpoint
                if bind:
                    refuse_live_ipc(ep)
                    self._secure(cfg, curve is not None, server=True)
                    self._sock.bind(ep)  # LAST_ENDPOINT resolves tcp://host:* to the real port
                    self.endpoints.append(self._sock.getsockopt(zmq.LAST_ENDPOINT).decode())
                    self._bound[self.endpoints[-1]] = cfg
                else:
                    self._secure(cfg, curve is not None, server=False)
                    self._sock.connect(ep)
                    self.endpoints.append(ep)
                    self._security[ep] = cfg
            self._tending = self._mon is not None or self._allow is not None
        except BaseException:
            self.close()
            raise

    def _monitor(self) -> zmq.Socket:
        """A PAIR socket receiving this socket's _WATCH events. Its RCVHWM is 0: libzmq's
        I/O thread blocks on a full monitor queue (CONNECT_RETRIED arrives every 100 ms
        while a peer is down), and with it every socket of the context."""
        addr = f"inproc://rtinfer.bus.monitor.{next(_monitor_ids)}"
        self._sock.monitor(addr, _WATCH)
        mon = self._ctx.socket(zmq.PAIR)
        mon.setsockopt(zmq.LINGER, 0)
        mon.setsockopt(zmq.RCVHWM, 0)
        mon.connect(addr)
        return mon

    def _secure(self, cfg: CurveConfig | None, any_curve: bool, *, server: bool) -> None:
        # libzmq copies the security options at each bind/connect, so each endpoint gets
        # its own server key (or none: CURVE_SERVER=0 means NULL).
        if cfg is not None:
            secure_socket(self._sock, cfg, server=server)
        elif any_curve:
            self._sock.curve_server = False

    def _heal(self, now: int) -> None:
        """Reconnect every endpoint libzmq gave up on since the last look (at most every
        HEAL_EVERY_NS; a no-op for a bound socket).

        Given up on: a handshake that failed on a protocol error, or a session that ended
        (DISCONNECTED) with no CONNECT_RETRIED by the next look: libzmq follows a lost
        connection with a retry at once, and a protocol error with nothing. A handshake the
        server refused (its allow-list: HANDSHAKE_FAILED_AUTH, which libzmq never retries
        either) is tried again every REFUSED_RETRY_NS, so a key added there is admitted
        without restarting this side; counted in `refusals`.
        """
        if self._mon is None or now < self._next_heal:
            return
        self._next_heal = now + HEAL_EVERY_NS
        failed, up, ended = set(), self._up, self._ended
        while zmq_poll([(self._mon, _POLLIN)], 0):
            msg = recv_monitor_message(self._mon)
            event, ep = msg["event"], self._known(msg["endpoint"].decode())
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                up.add(ep)
            elif event == zmq.EVENT_DISCONNECTED:
                if ep in up:  # a session ended (not a handshake that failed)
                    up.discard(ep)
                    ended.setdefault(ep, now)
            elif event == zmq.EVENT_CONNECT_RETRIED:
                ended.pop(ep, None)  # libzmq reconnects this one itself
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.refusals += 1
                self._refused.setdefault(ep, now)
            else:
                failed.add(ep)  # HANDSHAKE_FAILED_PROTOCOL
        for ep in [ep for ep, seen in self._refused.items() if now - seen >= REFUSED_RETRY_NS]:
            del self._refused[ep]
            failed.add(ep)
        for ep in [ep for ep, seen in ended.items() if seen < now]:  # no retry since a look ago
            del ended[ep]
            self.sessions_ended += 1
            failed.add(ep)
        for ep in failed:
            # an endpoint libzmq names otherwise than we did (a resolved host): all of them
            for known in ([ep] if ep in self._security else list(self._security)):
                try:
                    self._sock.disconnect(known)
                except zmq.ZMQError:
                    pass  # libzmq dropped it already: connecting again is what matters
                try:
                    self._secure(self._security[known], True, server=False)
                    self._sock.connect(known)
                    self.reconnects += 1
                except zmq.ZMQError:
                    self.heal_errors += 1

    def _tend(self, now: int) -> None:
        """The periodic work of a connecting socket (`_heal`) or a CURVE server (`_watch`);
        call only where `_tending` is true. Each checks its own schedule."""
        if self._mon is not None:
            self._heal(now)
        if self._allow is not None and now >= self._next_watch:
            self._watch(now)

    def _watch(self, now: int) -> None:
        """Re-read the allow-list; if a key this socket admitted is gone, cut every session."""
        self._next_watch = now + WATCH_EVERY_NS
        self._allow.refresh()
        names = self._allow.names
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
        for ep in self._bound:
            try:
                self._sock.unbind(ep)
            except zmq.ZMQError:
                pass  # not bound (its rebind failed before): bound below
        self._unbound = False
        for ep, cfg in self._bound.items():
            give_up = now_ns() + REBIND_WAIT_NS
            while True:
                try:
                    self._secure(cfg, True, server=True)
                    self._sock.bind(ep)
                    break
                except zmq.ZMQError:
                    if now_ns() > give_up:
                        self.heal_errors += 1
                        self._unbound = True
                        break
                    time.sleep(0.001)  # the unbind completes in libzmq's I/O thread

    def _known(self, ep: str) -> str:
        """Our name for an endpoint libzmq names ``ep``: some of its events name a tcp host
        as resolved (tcp://localhost:5 -> tcp://127.0.0.1:5), so an unknown name maps to the
        one connected tcp endpoint of that port, if there is one; else it stays as it is."""
        if ep in self._security or not ep.startswith("tcp://"):
            return ep
        port = ep.rpartition(":")[2]
        same = [k for k in self._security if k.startswith("tcp://") and k.rpartition(":")[2] == port]
        return same[0] if len(same) == 1 else ep

    def close(self) -> None:
        """Close the socket at once (LINGER 0, queued messages are discarded); idempotent."""
        if self._sock is None:
            return
        if self._mon is not None:
            try:
                self._sock.monitor(None, 0)
            except zmq.ZMQError:
                pass
            finally:
                self._mon.close(linger=0)
                self._mon = None
        self._sock.close(linger=0)
        self._sock = None
        if self._auth:
            release_authenticator(self._ctx)
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Publisher(_BusSocket):
    """Publishes envelopes on one endpoint; binds by default.

    ``publish`` never blocks. Note that a PUB socket never blocks anyway: at the high
    water mark libzmq drops the message for that subscriber *silently* and exposes no
    counter, so ``counters["dropped"]`` cannot see those drops (receivers see them as
    seq gaps). It counts what zmq does report: ``zmq.Again``, and a multipart send that
    fails mid-way. ``count_drops=True`` sets ZMQ_XPUB_NODROP so a full queue raises Again
    and is counted, at a price: one slow subscriber then makes the message drop for all.

    Arrays of at least ``oob_bytes`` go out-of-band and are sent without copying: do not
    mutate them after ``publish`` (zmq reads them later from its I/O thread).
    """

    def __init__(self, endpoint: str, src: str, *, bind: bool = True, hwm: int = 1000,
                 ctx: zmq.Context | None = None, curve: Curve = None,
                 oob_bytes: int = 65536, count_drops: bool = False) -> None:
        options = [(zmq.XPUB_NODROP, 1)] if count_drops else []
        super().__init__(zmq.PUB, [endpoint], bind=bind, hwm=hwm, ctx=ctx, curve=curve,
                         options=options)
        self.endpoint = self.endpoints[0]
        self.src = src
        self.counters = {"sent": 0, "dropped": 0}
        self._oob_bytes = oob_bytes
        self._seq = 0
        self._topic_bytes: dict = {}  # topic, or (topic, to) -> its frame
        self._open_multipart = False  # a send failed mid-message; must be terminated first

    def publish(self, topic: str, body: dict, stamps: dict | None = None,
                to: str | None = None) -> bool:
        """Send one message without blocking; True if zmq accepted it.

        Adds stamp "publish" (now_ns) unless present; the caller's dict is not modified.
        seq advances on every call that encodes, so receivers see drops as seq gaps.
        Raises WireError (nothing sent) if the body does not match the topic's schema.
        to: address it to one robot (its body's ``dest``, ValueError otherwise): only that
        robot's ``Subscriber(to=...)`` and the unaddressed Subscribers of the topic receive
        it. Receivers that predate addressed frames reject it (docs/wire.md).
        """
        if to is not None and body.get("dest") != to:
            raise ValueError(f"a message addressed to {to!r} must have dest {to!r} in its "
                             f"body, not {body.get('dest')!r}")
        st = {} if stamps is None else dict(stamps)
        if "publish" not in st:
            st["publish"] = now_ns()
        if self._tending:
            self._tend(now_ns())
        frames = encode_frames(topic, body, seq=self._seq, src=self.src, stamps=st,
                               oob_bytes=self._oob_bytes)
        self._seq += 1
        key = topic if to is None else (topic, to)
        topic_b = self._topic_bytes.get(key)
        if topic_b is None:
            topic_b = self._topic_bytes[key] = topic.encode() if to is None else \
                addressed_topic(topic, to)
        counters = self.counters
        if self._open_multipart and not self._terminate():
            counters["dropped"] += 1
            return False
        sock = self._sock
        try:
            sock.send(topic_b, _NOBLOCK_MORE)
        except zmq.Again:
            counters["dropped"] += 1
            return False
        if not self._send_rest(sock, frames):
            counters["dropped"] += 1
            return False
        counters["sent"] += 1
        return True

    def _send_rest(self, sock: zmq.Socket, frames: list) -> bool:
        """The frames after the topic; big ones zero-copy. False if zmq refused one."""
        last = len(frames)
        try:
            if last == 1:  # the common case: one envelope frame, no out-of-band arrays
                sock.send(frames[0], _NOBLOCK, copy=len(frames[0]) < self._oob_bytes)
                return True
            for i, frame in enumerate(frames, 1):
                size = frame.nbytes if isinstance(frame, memoryview) else len(frame)
                sock.send(frame, _NOBLOCK_MORE if i < last else _NOBLOCK,
                          copy=size < self._oob_bytes)
        except zmq.Again:
            self._open_multipart = True
            self._terminate()
            return False
        return True

    def _terminate(self) -> bool:
        """End a half-sent message with an empty last frame.

        zmq cannot abort a started multipart message; unterminated, the next message
        would be glued onto it. Receivers reject the truncated message (WireError).
        """
        try:
            self._sock.send(b"", _NOBLOCK)
        except zmq.Again:
            return False
        self._open_multipart = False
        return True


def _server_addresses(endpoint: str) -> list[str] | None:
    """The IP addresses libzmq may name as a tcp endpoint's Peer-Address (its host resolved),
    or None for an endpoint that is not tcp."""
    if not endpoint.startswith("tcp://"):
        return None
    host = endpoint[len("tcp://"):].rpartition(";")[2].rpartition(":")[0].strip("[]")
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return [host]


def _by_peer(endpoints: Sequence[str], curve: Curve, bind: bool
             ) -> list[tuple[list[str], str | None, dict[str, str | None] | None]]:
    """The sockets a Subscriber needs, as (endpoints, peer, by_address): every message of the
    socket comes from ``peer``, or (by_address not None) from by_address[its Peer-Address].

    Connecting, an endpoint's peer is the Z85 server key its CURVE trusts (None: plaintext).
    The session to it is authenticated to that key, and libzmq names its remote address on
    every message, so endpoints share a socket while no address of one is that of another
    with a different peer (robots on hosts of their own: one socket). Two servers on one
    host with different keys get a socket each: zmq_poll costs ~2 us a socket. A binding
    socket is one (ZAP's User-Id names the client of each message).
    """
    if bind or curve is None:
        return [(list(endpoints), None, None)]
    legs: list[tuple[list[str], set, dict]] = []  # (endpoints, peers, address -> peer)
    for ep in endpoints:
        cfg = curve if isinstance(curve, CurveConfig) else curve.get(ep)
        key = None
        if cfg is not None and cfg.server_public_key_file is not None:
            key = load_public(cfg.server_public_key_file).decode()
        addrs = _server_addresses(ep)
        for eps, keys, by_addr in legs:
            if addrs is None:  # not tcp: no address names it, it shares only with its peer
                fits = keys == {key} and by_addr is None
            else:
                fits = by_addr is not None and all(by_addr.get(x, key) == key for x in addrs)
            if fits:
                break
        else:
            eps, keys, by_addr = [], set(), (None if addrs is None else {})
            legs.append((eps, keys, by_addr))
        eps.append(ep)
        keys.add(key)
        if addrs is not None:
            by_addr.update(dict.fromkeys(addrs, key))
    return [(eps, next(iter(keys)), None) if len(keys) == 1 else (eps, None, by_addr)
            for eps, keys, by_addr in legs]


class Subscriber:
    """Receives, validates and stamps envelopes of the given topics; connects by default.

    Counters: received, rejected (malformed, wrong topic, bad schema), oversize (over
    ``max_bytes``), superseded (replaced by a newer message of the same topic before being
    handed out), dropped_for_age (``max_age_ns``), and ``received.<topic>``. Each message
    dropped is in exactly one of them. A connecting Subscriber also counts, as attributes,
    ``sessions_ended`` (libzmq ended a session: a frame over the hard cap) and
    ``reconnects`` (see _BusSocket); a binding CURVE one ``revocations`` and ``revoked``.

    Peers: ``peer`` is who the message ``recv`` returned last came from, as CURVE
    authenticated it: the Z85 public key (str) of the server at its endpoint (connecting:
    told apart by the remote address libzmq names on each message; servers on one host with
    different keys get a socket each, see _by_peer), or of the client that sent it (binding:
    ZAP's User-Id); None without CURVE. ``peers`` is the
    same per topic for what ``poll_latest`` returned last. The ``src`` a message declares is
    not checked against it here: that is rtinfer.transport.identity's.

    to: {topic: robot}: of these topics, take only the messages addressed to that robot
    (``Publisher.publish(..., to=robot)``: libzmq drops the others at the publisher), and no
    unaddressed ones. Every other topic, addressed or not, is taken whatever its address; an
    addressed message whose body's ``dest`` is not its address is rejected.

    latest_only: for state topics. ZMQ_CONFLATE is not used because it does not support
    multipart messages (and every message here is multipart); instead each ``recv``
    drains the socket and keeps only the newest message per topic.
    max_age_ns: drop messages whose stamps["capture"] (else stamps["publish"]) is older
    than this on arrival. Stamps are monotonic: meaningful on one host only.
    max_bytes: the largest message (all frames) handed out; a larger one is dropped and
    counted in "oversize", and the session lives on. libzmq's own per-frame limit
    (ZMQ_MAXMSGSIZE) is ``hard_cap_bytes`` = hard_cap_bytes(max_bytes), a memory guard: a
    frame over it ends the session (libzmq), and a connecting Subscriber then reconnects
    within about 2 x HEAL_EVERY_NS while it is being read (recv/poll_latest). Messages sent
    meanwhile are lost: a seq gap. docs/wire.md, "Size limits".
    Whether a topic is alive, and its rate, is the receiver's business: keep a
    rtinfer.transport.liveliness.Liveliness and note the "recv" stamps it cares about.
    Not thread-safe (module doc).
    """

    def __init__(self, endpoints: str | Sequence[str], topics: Sequence[str], *,
                 bind: bool = False, latest_only: bool = False, hwm: int = 1000,
                 ctx: zmq.Context | None = None, curve: Curve = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_age_ns: int | None = None,
                 to: Mapping[str, str] | None = None) -> None:
        if not topics or any(not t for t in topics):
            raise ValueError("Subscriber needs at least one non-empty topic")
        self.topics = tuple(dict.fromkeys(topics))
        self._to = dict(to or {})
        if set(self._to) - set(self.topics):
            raise ValueError(f"to= names topics {sorted(set(self._to) - set(self.topics))} "
                             f"this Subscriber does not take ({list(self.topics)})")
        self._by_bytes = {t.encode(): t for t in self.topics}
        self.hard_cap_bytes = hard_cap_bytes(max_bytes)
        options = [(zmq.MAXMSGSIZE, self.hard_cap_bytes)] + [
            (zmq.SUBSCRIBE, addressed_topic(t, self._to[t]) if t in self._to else t.encode())
            for t in self.topics]
        eps = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self._own_ctx = ctx is None
        self._ctx = zmq.Context() if ctx is None else ctx
        self._legs: list[_BusSocket] = []
        leg_peers = []
        try:
            for group, peer, by_address in _by_peer(eps, curve, bind):
                self._legs.append(_BusSocket(zmq.SUB, group, bind=bind, hwm=hwm, ctx=self._ctx,
                                             curve=curve, options=options))
                leg_peers.append((peer, by_address))
        except BaseException:
            self.close()
            raise
        self.endpoints = [ep for leg in self._legs for ep in leg.endpoints]
        # sock -> (its one peer, None) or (None, {Peer-Address: peer}); binding with CURVE:
        # ZAP's User-Id names each message's client
        self._peer_of = {leg._sock: p for leg, p in zip(self._legs, leg_peers)}
        self._user_id = any(leg._allow is not None for leg in self._legs)
        self._tending = any(leg._tending for leg in self._legs)
        self._next_tend = 0
        self.peer: str | None = None
        self.peers: dict[str, str | None] = {}
        self.latest_only = latest_only
        self.max_age_ns = max_age_ns
        self.counters = {"received": 0, "rejected": 0, "oversize": 0, "superseded": 0,
                         "dropped_for_age": 0}
        self._count_key = {t: f"received.{t}" for t in self.topics}  # no per-message f-string
        self.counters.update(dict.fromkeys(self._count_key.values(), 0))
        self._max_bytes = max_bytes
        self._drain_limit = 2 * hwm + 1  # bounds the work of one call under a flood
        # zmq_poll directly: Poller costs more. With several sockets the order rotates after
        # each message handed out, so one that floods cannot starve the others.
        self._poll_items = [(leg._sock, _POLLIN) for leg in self._legs]
        self._rotate = len(self._poll_items) > 1
        self._alone = {item[0]: [item] for item in self._poll_items}  # each socket's own poll
        self._pending: dict[str, Envelope] = {}  # newest per topic, not yet handed out
        self._pending_peers: dict[str, str | None] = {}
        self._last: dict[str, Envelope] = {}

    # counters of the sockets, summed (see _BusSocket)
    reconnects = property(lambda self: sum(leg.reconnects for leg in self._legs))
    heal_errors = property(lambda self: sum(leg.heal_errors for leg in self._legs))
    refusals = property(lambda self: sum(leg.refusals for leg in self._legs))
    sessions_ended = property(lambda self: sum(leg.sessions_ended for leg in self._legs))
    revocations = property(lambda self: sum(leg.revocations for leg in self._legs))
    revoked = property(lambda self: [name for leg in self._legs for name in leg.revoked])

    def _tend(self, now: int) -> None:
        self._next_tend = now + HEAL_EVERY_NS
        for leg in self._legs:
            if leg._tending:
                leg._tend(now)

    def recv(self, timeout_ms: int = 0) -> Envelope | None:
        """The next valid message, or None after ``timeout_ms`` (0: don't wait, <0: forever).

        Stamps "recv" (now_ns); sets ``peer``. Malformed messages are counted and skipped,
        never raised. In latest_only mode, drains the socket first and returns the newest
        message of the topic that has waited longest; older ones are counted as superseded.
        """
        if self._tending:
            now = now_ns()
            if now >= self._next_tend:
                self._tend(now)
            if timeout_ms < 0 or timeout_ms > _HEAL_EVERY_MS:  # keep tending while waiting
                return self._in_slices(self.recv, timeout_ms)
        if self.latest_only:
            self._fill(timeout_ms)
            if not self._pending:
                return None
            topic = next(iter(self._pending))
            self.peer = self._pending_peers.pop(topic)
            return self._pending.pop(topic)
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        wait_ms, items = timeout_ms, self._poll_items
        # Poll before reading: reading an empty socket raises zmq.Again, which costs ~3x more.
        while True:
            ready = zmq_poll(items, wait_ms)
            if not ready:
                return None
            for sock, _ in ready:
                for _ in range(self._drain_limit):
                    env = self._take(sock)
                    if env is _EMPTY:
                        break
                    if env is not None:
                        if self._rotate:
                            items.append(items.pop(0))
                        return env
            wait_ms = self._left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return None

    def poll_latest(self, timeout_ms: int = 0) -> dict[str, Envelope]:
        """Drain everything queued; the newest message per topic (older: superseded), their
        peers in ``peers``. Waits up to ``timeout_ms`` only while nothing at all has arrived.
        """
        if self._tending:
            now = now_ns()
            if now >= self._next_tend:
                self._tend(now)
            if timeout_ms < 0 or timeout_ms > _HEAL_EVERY_MS:  # keep tending while waiting
                return self._in_slices(self.poll_latest, timeout_ms)
        self._fill(timeout_ms)
        out, self._pending = self._pending, {}
        self.peers, self._pending_peers = self._pending_peers, {}
        return out

    def _in_slices(self, take, timeout_ms: int):
        """take(wait_ms) in waits of at most HEAL_EVERY_MS until it returns something or
        ``timeout_ms`` is up (<0: never), so a dead endpoint is healed while we wait."""
        deadline = None if timeout_ms < 0 else now_ns() + timeout_ms * 1_000_000
        while True:
            wait_ms = (_HEAL_EVERY_MS if deadline is None
                       else min(_HEAL_EVERY_MS, self._left_ms(deadline, timeout_ms)))
            got = take(wait_ms)
            if got or wait_ms == 0:
                return got

    def last(self, topic: str) -> Envelope | None:
        """The newest valid message of ``topic`` received so far (handed out or not)."""
        return self._last.get(topic)

    def _fill(self, timeout_ms: int) -> None:
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        pending, peers, items = self._pending, self._pending_peers, self._poll_items
        wait_ms = 0 if pending else timeout_ms
        while True:
            ready = zmq_poll(items, wait_ms)
            if not ready:
                return
            for sock, _ in ready:
                one = self._alone[sock]
                for _ in range(self._drain_limit):
                    env = self._take(sock)
                    if env is _EMPTY:
                        break
                    if env is not None:
                        if pending.pop(env.topic, None) is not None:
                            self.counters["superseded"] += 1
                        pending[env.topic] = env  # re-insert: dict order = arrival order of newest
                        peers[env.topic] = self.peer
                    if not zmq_poll(one, 0):  # drained (cheaper than the Again of an empty read)
                        break
            if pending:
                return
            wait_ms = self._left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return

    @staticmethod
    def _left_ms(deadline: int | None, timeout_ms: int) -> int:
        """Milliseconds left to wait (-1: forever, 0: time is up), rounded up."""
        if deadline is None:
            return -1 if timeout_ms < 0 else 0
        return max(0, -(-(deadline - now_ns()) // 1_000_000))  # ceil: a sub-ms rest still waits

    def _take(self, sock: zmq.Socket):
        """One message off ``sock``: Envelope (``peer`` set), None (rejected/too old) or _EMPTY."""
        try:
            head = sock.recv(_NOBLOCK, copy=False)
        except zmq.Again:
            return _EMPTY
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
        topic, dest = self._by_bytes.get(head.bytes), None
        if topic is None:
            topic, dest = self._addressed(head.bytes)
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
        except WireError:
            self.counters["rejected"] += 1
            return None
        if env.topic != topic or (dest is not None and env.body.get("dest") != dest):
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
        if self._user_id:
            self.peer = self._client_of(head)
        else:
            peer, by_address = self._peer_of[sock]
            self.peer = peer if by_address is None else self._server_of(head, by_address)
        return env

    def _addressed(self, frame: bytes) -> tuple[str | None, str | None]:
        """(topic, address) of an addressed topic frame of ours, else (None, None)."""
        name, sep, rest = frame.partition(b"\x00")
        topic = self._by_bytes.get(name) if sep and rest[-1:] == b"\x00" else None
        if topic is None:
            return None, None
        try:
            dest = rest[:-1].decode()
        except UnicodeDecodeError:
            return None, None
        want = self._to.get(topic)
        return (topic, dest) if want is None or want == dest else (None, None)

    @staticmethod
    def _client_of(head: zmq.Frame) -> str | None:
        """The CURVE client that sent this frame (ZAP's User-Id), or None (a NULL session)."""
        try:
            return head.get("User-Id") or None
        except zmq.ZMQError:
            return None

    @staticmethod
    def _server_of(head: zmq.Frame, by_address: dict) -> str | None:
        """The peer of the server this frame came from, by its Peer-Address (~0.7 us). An
        address none of our endpoints resolved to (its host's DNS changed since) is named
        ``unknown@ADDRESS``: never None, which would pass for plaintext."""
        try:
            address = head.get("Peer-Address")
        except zmq.ZMQError:
            address = ""
        return by_address[address] if address in by_address else f"unknown@{address}"

    def close(self) -> None:
        """Close every socket at once (LINGER 0, queued messages are discarded); idempotent."""
        for leg in self._legs:
            leg.close()
        self._legs = []
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
