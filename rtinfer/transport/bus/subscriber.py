"""The bus's subscriber: validated, counted, stamped receive (rtinfer.transport.bus)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import zmq
from zmq import zmq_poll

from rtinfer.transport.bus.heal import HEAL_EVERY_NS
from rtinfer.transport.bus.intake import EMPTY as _EMPTY
from rtinfer.transport.bus.intake import Intake, left_ms
from rtinfer.transport.bus.peers import plan_legs
from rtinfer.transport.bus.shm import is_shm, refuse_curve
from rtinfer.transport.bus.shm_intake import ShmLeg, ShmWait
from rtinfer.transport.bus.sockets import POLLIN as _POLLIN
from rtinfer.transport.bus.sockets import BusSocket, Curve
from rtinfer.transport.bus.topics import addressed_topic, hard_cap_bytes
from rtinfer.transport.wire import DEFAULT_MAX_BYTES, Envelope, now_ns

_HEAL_EVERY_MS = HEAL_EVERY_NS // 1_000_000


class Subscriber(Intake):
    """Receives, validates and stamps envelopes of the given topics; connects by default.

    Counters: received, rejected (malformed, wrong topic, bad schema), oversize (over
    ``max_bytes``), superseded (replaced by a newer message of the same topic before being
    handed out), dropped_for_age (``max_age_ns``), and ``received.<topic>``. Each message
    dropped is in exactly one of them. ``say`` (a rtinfer.realtime.complaints.Complaints
    .say) is told each message the wire refused, with why, under kind "rejected": the
    owner's one rate-limited line, which counts the rest. A connecting Subscriber also
    counts, as attributes, ``sessions_ended`` (libzmq ended a session: a frame over the hard
    cap), ``sessions_lost`` (sessions that ended after their handshake, for any reason),
    ``refusals`` and ``reconnects`` (rtinfer.transport.bus.heal); a binding CURVE one
    ``revocations`` and ``revoked`` (rtinfer.transport.bus.watch).

    Peers: ``peer`` is who the message ``recv`` returned last came from, as CURVE
    authenticated it: the Z85 public key (str) of the server at its endpoint (connecting:
    each endpoint has a socket of its own, rtinfer.transport.bus.peers says why), or of the
    client that sent it (binding: ZAP's User-Id); None without CURVE. ``peers`` is the same
    per topic for what ``poll_latest`` returned last. The ``src`` a message declares is not
    checked against it here: that is rtinfer.transport.identity's.

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
    shm://NAME endpoints (rtinfer.transport.bus.shm_intake) may stand beside ZeroMQ ones:
    the same checks and counters, no peer (None), queues of at most shm.QUEUE messages (the
    oldest pushed out), at most shm.HELD messages held at once (``receive_errors`` past it),
    and the wait is an iceoryx2 WaitSet's instead of zmq_poll's.
    Whether a topic is alive, and its rate, is the receiver's business: keep a
    rtinfer.transport.liveliness.Liveliness and note the "recv" stamps it cares about.
    Not thread-safe (module doc).
    """

    def __init__(self, endpoints: str | Sequence[str], topics: Sequence[str], *,
                 bind: bool = False, latest_only: bool = False, hwm: int = 1000,
                 ctx: zmq.Context | None = None, curve: Curve = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_age_ns: int | None = None,
                 to: Mapping[str, str] | None = None,
                 say: Callable[..., None] | None = None) -> None:
        if not topics or any(not t for t in topics):
            raise ValueError("Subscriber needs at least one non-empty topic")
        self.topics = tuple(dict.fromkeys(topics))
        self._to = dict(to or {})
        if set(self._to) - set(self.topics):
            raise ValueError(f"to= names topics {sorted(set(self._to) - set(self.topics))} "
                             f"this Subscriber does not take ({list(self.topics)})")
        self._by_bytes = {t.encode(): t for t in self.topics}
        self.hard_cap_bytes = hard_cap_bytes(max_bytes)
        prefixes = tuple(addressed_topic(t, self._to[t]) if t in self._to else t.encode()
                         for t in self.topics)  # shm legs filter by them as libzmq does
        options: list[tuple[int, int | bytes]] = [(zmq.MAXMSGSIZE, self.hard_cap_bytes)]
        options += [(zmq.SUBSCRIBE, prefix) for prefix in prefixes]
        eps = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        shm_eps = [ep for ep in eps if is_shm(ep)]
        zmq_eps = [ep for ep in eps if not is_shm(ep)]
        self._own_ctx = ctx is None
        ctx = zmq.Context() if ctx is None else ctx
        self._ctx: zmq.Context | None = ctx
        self._legs: list[BusSocket] = []
        self._shm_legs: list[ShmLeg] = []
        self._shm_wait: ShmWait | None = None
        leg_peers = []
        try:
            for group, peer in plan_legs(zmq_eps, curve, bind) if zmq_eps else ():
                self._legs.append(BusSocket(zmq.SUB, group, bind=bind, hwm=hwm, ctx=ctx,
                                             curve=curve, options=options))
                leg_peers.append(peer)
            for ep in shm_eps:
                refuse_curve(ep, curve)
                self._shm_legs.append(ShmLeg(ep, hwm, prefixes, self))
        except BaseException:
            self.close()
            raise
        self.endpoints = [ep for leg in self._legs for ep in leg.endpoints] + shm_eps
        # sock -> the peer of its messages; binding with CURVE: ZAP's User-Id names each
        # message's client
        socks = [leg.sock for leg in self._legs]
        self._peer_of = dict(zip(socks, leg_peers))
        self._user_id = any(leg._watch is not None for leg in self._legs)
        self._tending = any(leg._tending for leg in self._legs)
        self._next_tend = 0
        self._lost_seen = 0  # sessions_lost when last looked at (_tend)
        self.peer: str | None = None
        self.peers: dict[str, str | None] = {}
        self.latest_only = latest_only
        self.max_age_ns = max_age_ns
        self.counters = {"received": 0, "rejected": 0, "oversize": 0, "superseded": 0,
                         "dropped_for_age": 0}
        self._say = say
        self._count_key = {t: f"received.{t}" for t in self.topics}  # no per-message f-string
        self.counters.update(dict.fromkeys(self._count_key.values(), 0))
        self._max_bytes = max_bytes
        self._drain_limit = 2 * hwm + 1  # bounds the work of one call under a flood
        # zmq_poll directly: Poller costs more. With several sockets the order rotates after
        # each message handed out, so one that floods cannot starve the others. shm endpoints
        # are items too; then an iceoryx2 WaitSet waits on all of them (shm_intake).
        self._poll_items = [(s, _POLLIN) for s in socks]
        self._poll_items += [(leg, _POLLIN) for leg in self._shm_legs]
        self._rotate = len(self._poll_items) > 1
        self._takers = {s: partial(self._take, s) for s in socks}  # item -> one message off it
        self._queued = {s: partial(zmq_poll, [(s, _POLLIN)], 0) for s in socks}  # -> anything left
        self._takers.update({leg: leg.take for leg in self._shm_legs})
        self._queued.update({leg: leg.queued for leg in self._shm_legs})
        self._poll = zmq_poll
        if self._shm_legs:
            self._shm_wait = ShmWait(self._shm_legs, socks)
            self._poll = self._shm_wait.poll
        self._pending: dict[str, Envelope] = {}  # newest per topic, not yet handed out
        self._pending_peers: dict[str, str | None] = {}
        self._last: dict[str, Envelope] = {}

    # counters of the sockets, summed (see BusSocket)
    reconnects = property(lambda self: sum(leg.reconnects for leg in self._legs))
    sessions_lost = property(lambda self: sum(leg.sessions_lost for leg in self._legs))
    heal_errors = property(lambda self: sum(leg.heal_errors for leg in self._legs))
    refusals = property(lambda self: sum(leg.refusals for leg in self._legs))
    sessions_ended = property(lambda self: sum(leg.sessions_ended for leg in self._legs))
    revocations = property(lambda self: sum(leg.revocations for leg in self._legs))
    revoked = property(lambda self: [name for leg in self._legs for name in leg.revoked])
    receive_errors = property(lambda self: sum(leg.receive_errors for leg in self._shm_legs))

    @property
    def legs(self) -> dict[str, dict[str, int]]:
        """Per socket (its endpoints, joined by a space): its refusals and reconnects, to tell
        which peer refused or was healed."""
        return {" ".join(leg.endpoints): {"refusals": leg.refusals, "reconnects": leg.reconnects}
                for leg in self._legs}

    def _tend(self, now: int) -> None:
        """Each socket's care; and when one lost a session it had (its server died, or cut
        its sessions), the others try a refused handshake again soon (Healer.hurry): a
        fleet's robot is being placed on one of them."""
        self._next_tend = now + HEAL_EVERY_NS
        for leg in self._legs:
            if leg._tending:
                leg._tend(now)
        lost = self.sessions_lost
        if lost != self._lost_seen:
            self._lost_seen = lost
            for leg in self._legs:
                leg.hurry()

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
            ready = self._poll(items, wait_ms)
            if not ready:
                return None
            for sock, _ in ready:
                take = self._takers[sock]
                for _ in range(self._drain_limit):
                    env = take()
                    if env is _EMPTY:
                        break
                    if env is not None:
                        if self._rotate:
                            items.append(items.pop(0))
                        return env
            wait_ms = left_ms(deadline, timeout_ms)
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
                       else min(_HEAL_EVERY_MS, left_ms(deadline, timeout_ms)))
            got = take(wait_ms)
            if got or wait_ms == 0:
                return got

    def last(self, topic: str) -> Envelope | None:
        """The newest valid message of ``topic`` received so far (handed out or not)."""
        return self._last.get(topic)

    def close(self) -> None:
        """Close every socket at once (LINGER 0, queued messages are discarded); idempotent."""
        if self._shm_wait is not None:
            self._shm_wait.close()
            self._shm_wait = None
        for leg in self._legs:
            leg.close()
        for shm_leg in self._shm_legs:
            shm_leg.close()
        self._legs, self._shm_legs = [], []
        self._takers, self._queued = {}, {}  # they hold bound methods: let self go
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
