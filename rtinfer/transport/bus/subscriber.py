"""The bus's subscriber: validated, counted, stamped receive (rtinfer.transport.bus)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import zmq

from rtinfer.transport.bus.drain import Drain
from rtinfer.transport.bus.heal import HEAL_EVERY_NS
from rtinfer.transport.bus.intake import Intake, left_ms
from rtinfer.transport.bus.legs import ZmqLeg, ZmqLegs
from rtinfer.transport.bus.peers import plan_legs
from rtinfer.transport.bus.shm import is_shm, refuse_curve
from rtinfer.transport.bus.shm_intake import ShmLeg
from rtinfer.transport.bus.sockets import Curve
from rtinfer.transport.bus.topics import hard_cap_bytes
from rtinfer.transport.wire import DEFAULT_MAX_BYTES, Envelope, now_ns

_HEAL_EVERY_MS = HEAL_EVERY_NS // 1_000_000


def _summed(name: str) -> property:
    """A counter of the ZeroMQ legs, summed (see BusSocket)."""
    return property(lambda self: sum(getattr(leg, name) for leg in self._legs.socks))


class Subscriber:
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
    clock: the monotonic ns clock of the "recv" stamp and of max_age_ns (a node's injected
    clock); waits (``timeout_ms``) and the sockets' care run on real time.
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

    def __init__(
        self,
        endpoints: str | Sequence[str],
        topics: Sequence[str],
        *,
        bind: bool = False,
        latest_only: bool = False,
        hwm: int = 1000,
        ctx: zmq.Context | None = None,
        curve: Curve = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_ns: int | None = None,
        to: Mapping[str, str] | None = None,
        say: Callable[..., None] | None = None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        if not topics or any(not t for t in topics):
            raise ValueError("Subscriber needs at least one non-empty topic")
        self.topics = tuple(dict.fromkeys(topics))
        self._intake = intake = Intake(self.topics, to, max_bytes, max_age_ns, say, clock)
        self.counters = intake.counters
        self.hard_cap_bytes = hard_cap_bytes(max_bytes)
        options: list[tuple[int, int | bytes]] = [(zmq.MAXMSGSIZE, self.hard_cap_bytes)]
        options += [(zmq.SUBSCRIBE, prefix) for prefix in intake.prefixes]
        eps = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        shm_eps = [ep for ep in eps if is_shm(ep)]
        zmq_eps = [ep for ep in eps if not is_shm(ep)]
        self._own_ctx = ctx is None
        ctx = zmq.Context() if ctx is None else ctx
        self._ctx: zmq.Context | None = ctx
        self._legs = ZmqLegs()
        self._shm_legs: list[ShmLeg] = []
        try:
            for group, peer in plan_legs(zmq_eps, curve, bind) if zmq_eps else ():
                self._legs.add(
                    ZmqLeg(
                        group,
                        peer,
                        intake,
                        bind=bind,
                        hwm=hwm,
                        ctx=ctx,
                        curve=curve,
                        options=options,
                    )
                )
            for ep in shm_eps:
                refuse_curve(ep, curve)
                self._shm_legs.append(ShmLeg(ep, hwm, intake))
            # 2 x hwm + 1 messages off a leg in a turn: bounds the work of a call in a flood
            self._drain = Drain(self._legs.socks, self._shm_legs, 2 * hwm + 1, self.counters)
        except BaseException:
            self._let_go()
            raise
        self.endpoints = [ep for leg in self._legs.socks for ep in leg.endpoints] + shm_eps
        self.latest_only = latest_only

    reconnects = _summed("reconnects")
    sessions_lost = _summed("sessions_lost")
    heal_errors = _summed("heal_errors")
    refusals = _summed("refusals")
    sessions_ended = _summed("sessions_ended")
    revocations = _summed("revocations")
    revoked = property(lambda self: [name for leg in self._legs.socks for name in leg.revoked])
    receive_errors = property(lambda self: sum(leg.receive_errors for leg in self._shm_legs))
    max_age_ns = property(lambda self: self._intake.max_age_ns)

    peer = property(lambda self: self._drain.peer)  # see the class's doc
    peers = property(lambda self: self._drain.peers)

    @property
    def legs(self) -> dict[str, dict[str, int]]:
        """Per socket (its endpoints, joined by a space): its refusals and reconnects, to tell
        which peer refused or was healed."""
        return self._legs.per_socket()

    def tend(self, now: int) -> None:
        """The sockets' care at ``now`` (monotonic ns): healing a connecting one, the
        allow-list watch of a bound CURVE one. ``recv`` and ``poll_latest`` do it every
        HEAL_EVERY_NS while they read or wait; call it where nothing is read for long."""
        self._legs.tend(now)

    def recv(self, timeout_ms: int = 0) -> Envelope | None:
        """The next valid message, or None after ``timeout_ms`` (0: don't wait, <0: forever).

        Stamps "recv" (now_ns); sets ``peer``. Malformed messages are counted and skipped,
        never raised. In latest_only mode, drains the socket first and returns the newest
        message of the topic that has waited longest; older ones are counted as superseded.
        """
        if self._legs.tending:
            self._legs.tend_if_due(now_ns())
            if timeout_ms < 0 or timeout_ms > _HEAL_EVERY_MS:  # keep tending while waiting
                return self._in_slices(self.recv, timeout_ms)
        if self.latest_only:
            return self._drain.oldest(timeout_ms)
        return self._drain.next(timeout_ms)

    def poll_latest(self, timeout_ms: int = 0) -> dict[str, Envelope]:
        """Drain everything queued; the newest message per topic (older: superseded), their
        peers in ``peers``. Waits up to ``timeout_ms`` only while nothing at all has arrived.
        """
        if self._legs.tending:
            self._legs.tend_if_due(now_ns())
            if timeout_ms < 0 or timeout_ms > _HEAL_EVERY_MS:  # keep tending while waiting
                return self._in_slices(self.poll_latest, timeout_ms)
        return self._drain.newest(timeout_ms)

    def _in_slices(self, take, timeout_ms: int):
        """take(wait_ms) in waits of at most HEAL_EVERY_MS until it returns something or
        ``timeout_ms`` is up (<0: never), so a dead endpoint is healed while we wait."""
        deadline = None if timeout_ms < 0 else now_ns() + timeout_ms * 1_000_000
        while True:
            wait_ms = (
                _HEAL_EVERY_MS
                if deadline is None
                else min(_HEAL_EVERY_MS, left_ms(deadline, timeout_ms))
            )
            got = take(wait_ms)
            if got or wait_ms == 0:
                return got

    def last(self, topic: str) -> Envelope | None:
        """The newest valid message of ``topic`` received so far (handed out or not)."""
        return self._intake.last(topic)

    def close(self) -> None:
        """Close every socket at once (LINGER 0, queued messages are discarded); idempotent."""
        self._drain.close()
        self._let_go()

    def _let_go(self) -> None:
        """Close the legs, then the context if it is ours; idempotent."""
        self._legs.close()
        for shm_leg in self._shm_legs:
            shm_leg.close()
        self._shm_legs = []
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
