"""ZeroMQ PUB/SUB bus: bounded, non-blocking publish; validated, counted receive.

A message is the multipart ``[topic, *wire.encode_frames(...)]``. Subscription is by
topic prefix inside libzmq, so the subscriber also checks that the topic frame is one of
its topics exactly and equals the envelope's topic ("obs" would otherwise match "obs2").

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
from typing import Mapping, Sequence, Union

import zmq
from zmq import zmq_poll
from zmq.utils.monitor import recv_monitor_message

from rtinfer.transport.curve import CurveConfig, acquire_authenticator, release_authenticator, secure_socket
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
# What a connecting socket's monitor reports (see _BusSocket._heal).
_WATCH = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_SUCCEEDED
          | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED)
_monitor_ids = itertools.count()  # inproc monitor names, unique in the process

# A Subscriber's libzmq limit (ZMQ_MAXMSGSIZE, per frame) is a memory guard well above its
# max_bytes: a message over max_bytes still arrives, and rtinfer drops and counts it with
# the session intact. Only a frame over this hard cap makes libzmq end the session.
HARD_CAP_FACTOR = 4
HARD_CAP_FLOOR_BYTES = 65536


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
        self.endpoints: list[str] = []
        self._security: dict[str, CurveConfig | None] = {}  # connected endpoint -> its CURVE
        self._up: set[str] = set()  # endpoints whose session is past its handshake
        self._ended: dict[str, int] = {}  # endpoint -> heal pass that saw its session end
        self.reconnects = self.heal_errors = self.sessions_ended = 0
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
                acquire_authenticator(self._ctx, allow.pop())
                self._auth = True
            if not bind:
                self._mon = self._monitor()
            for ep, cfg in zip(endpoints, per_ep):  # pyzmq's errors name the endpoint
                if bind:
                    refuse_live_ipc(ep)
                    self._secure(cfg, curve is not None, server=True)
                    self._sock.bind(ep)  # LAST_ENDPOINT resolves tcp://host:* to the real port
                    self.endpoints.append(self._sock.getsockopt(zmq.LAST_ENDPOINT).decode())
                else:
                    self._secure(cfg, curve is not None, server=False)
                    self._sock.connect(ep)
                    self.endpoints.append(ep)
                    self._security[ep] = cfg
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
        connection with a retry at once, and a protocol error with nothing.
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
            else:
                failed.add(ep)  # HANDSHAKE_FAILED_PROTOCOL
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
        self._topic_bytes: dict[str, bytes] = {}
        self._open_multipart = False  # a send failed mid-message; must be terminated first

    def publish(self, topic: str, body: dict, stamps: dict | None = None) -> bool:
        """Send one message without blocking; True if zmq accepted it.

        Adds stamp "publish" (now_ns) unless present; the caller's dict is not modified.
        seq advances on every call that encodes, so receivers see drops as seq gaps.
        Raises WireError (nothing sent) if the body does not match the topic's schema.
        """
        st = {} if stamps is None else dict(stamps)
        if "publish" not in st:
            st["publish"] = now_ns()
        if self._mon is not None:
            self._heal(now_ns())
        frames = encode_frames(topic, body, seq=self._seq, src=self.src, stamps=st,
                               oob_bytes=self._oob_bytes)
        self._seq += 1
        topic_b = self._topic_bytes.get(topic)
        if topic_b is None:
            topic_b = self._topic_bytes[topic] = topic.encode()
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


class Subscriber(_BusSocket):
    """Receives, validates and stamps envelopes of the given topics; connects by default.

    Counters: received, rejected (malformed, wrong topic, bad schema), oversize (over
    ``max_bytes``), superseded (replaced by a newer message of the same topic before being
    handed out), dropped_for_age (``max_age_ns``), and ``received.<topic>``. Each message
    dropped is in exactly one of them. A connecting Subscriber also counts, as attributes,
    ``sessions_ended`` (libzmq ended a session: a frame over the hard cap) and
    ``reconnects`` (see _BusSocket).

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
    """

    def __init__(self, endpoints: str | Sequence[str], topics: Sequence[str], *,
                 bind: bool = False, latest_only: bool = False, hwm: int = 1000,
                 ctx: zmq.Context | None = None, curve: Curve = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_age_ns: int | None = None) -> None:
        if not topics or any(not t for t in topics):
            raise ValueError("Subscriber needs at least one non-empty topic")
        self.topics = tuple(dict.fromkeys(topics))
        self._by_bytes = {t.encode(): t for t in self.topics}
        self.hard_cap_bytes = hard_cap_bytes(max_bytes)
        options = [(zmq.MAXMSGSIZE, self.hard_cap_bytes)] + [(zmq.SUBSCRIBE, t) for t in self._by_bytes]
        super().__init__(zmq.SUB, [endpoints] if isinstance(endpoints, str) else endpoints,
                         bind=bind, hwm=hwm, ctx=ctx, curve=curve, options=options)
        self.latest_only = latest_only
        self.max_age_ns = max_age_ns
        self.counters = {"received": 0, "rejected": 0, "oversize": 0, "superseded": 0,
                         "dropped_for_age": 0}
        self._count_key = {t: f"received.{t}" for t in self.topics}  # no per-message f-string
        self.counters.update(dict.fromkeys(self._count_key.values(), 0))
        self._max_bytes = max_bytes
        self._drain_limit = 2 * hwm + 1  # bounds the work of one call under a flood
        self._poll_items = [(self._sock, _POLLIN)]  # zmq_poll directly: Poller costs more
        self._pending: dict[str, Envelope] = {}  # newest per topic, not yet handed out
        self._last: dict[str, Envelope] = {}

    def recv(self, timeout_ms: int = 0) -> Envelope | None:
        """The next valid message, or None after ``timeout_ms`` (0: don't wait, <0: forever).

        Stamps "recv" (now_ns). Malformed messages are counted and skipped, never raised.
        In latest_only mode, drains the socket first and returns the newest message of
        the topic that has waited longest; older ones are counted as superseded.
        """
        if self._mon is not None:
            now = now_ns()
            if now >= self._next_heal:
                self._heal(now)
            if timeout_ms < 0 or timeout_ms > _HEAL_EVERY_MS:  # keep healing while waiting
                return self._in_slices(self.recv, timeout_ms)
        if self.latest_only:
            self._fill(timeout_ms)
            if not self._pending:
                return None
            return self._pending.pop(next(iter(self._pending)))
        deadline = now_ns() + timeout_ms * 1_000_000 if timeout_ms > 0 else None
        wait_ms = timeout_ms
        # Poll before reading: reading an empty socket raises zmq.Again, which costs ~3x more.
        while zmq_poll(self._poll_items, wait_ms):
            for _ in range(self._drain_limit):
                env = self._take()
                if env is _EMPTY:
                    break
                if env is not None:
                    return env
            wait_ms = self._left_ms(deadline, timeout_ms)
            if wait_ms == 0:
                return None
        return None

    def poll_latest(self, timeout_ms: int = 0) -> dict[str, Envelope]:
        """Drain everything queued; the newest message per topic (older: superseded).

        Waits up to ``timeout_ms`` only while nothing at all has arrived.
        """
        if self._mon is not None:
            now = now_ns()
            if now >= self._next_heal:
                self._heal(now)
            if timeout_ms < 0 or timeout_ms > _HEAL_EVERY_MS:  # keep healing while waiting
                return self._in_slices(self.poll_latest, timeout_ms)
        self._fill(timeout_ms)
        out, self._pending = self._pending, {}
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
        pending, items = self._pending, self._poll_items
        wait_ms = 0 if pending else timeout_ms
        while zmq_poll(items, wait_ms):
            for _ in range(self._drain_limit):
                env = self._take()
                if env is _EMPTY:
                    break
                if env is not None:
                    if pending.pop(env.topic, None) is not None:
                        self.counters["superseded"] += 1
                    pending[env.topic] = env  # re-insert: dict order = arrival order of newest
                if not zmq_poll(items, 0):  # drained (cheaper than the Again of an empty read)
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

    def _take(self):
        """One message off the socket: Envelope, None (rejected/too old) or _EMPTY."""
        sock = self._sock
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
        topic = self._by_bytes.get(head.bytes)
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
        if env.topic != topic:
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
