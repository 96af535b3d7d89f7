"""Admitting one message a Subscriber's leg took off its endpoint: topic frame, decode and
validation, address, age, the "recv" stamp, counters. Each message dropped is counted in
exactly one counter. Shared by the legs of one Subscriber (rtinfer.transport.bus.legs,
shm_intake); rtinfer.transport.bus.drain waits on the legs and orders what they take.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Final

from rtinfer.transport.bus.topics import addressed_topic, dest_ok, parse_addressed
from rtinfer.transport.wire import (
    Envelope,
    OversizeError,
    WireError,
    decode,
    decode_frames,
    now_ns,
)


class _Empty(enum.Enum):
    """EMPTY's type: an enum member, so that ``is EMPTY`` tells it from an Envelope."""

    EMPTY = 0


EMPTY: Final = _Empty.EMPTY  # sentinel: nothing queued on the leg
Taken = Envelope | _Empty | None  # a leg's take(): a message, EMPTY, or None (dropped)


class Intake:
    """The checks and counters of a Subscriber's ``topics`` (see Subscriber for ``to``,
    ``max_bytes``, ``max_age_ns``, ``say`` and ``clock``). ``counters`` is the Subscriber's.
    Not thread-safe."""

    def __init__(
        self,
        topics: tuple[str, ...],
        to: Mapping[str, str] | None,
        max_bytes: int,
        max_age_ns: int | None,
        say: Callable[..., None] | None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self.topics = topics
        self._to = dict(to or {})
        if set(self._to) - set(topics):
            raise ValueError(
                f"to= names topics {sorted(set(self._to) - set(topics))} "
                f"this Subscriber does not take ({list(topics)})"
            )
        # the topic frames subscribed to, as libzmq's SUBSCRIBE prefixes (shm legs filter so)
        self.prefixes = tuple(
            addressed_topic(t, self._to[t]) if t in self._to else t.encode() for t in topics
        )
        self.max_age_ns = max_age_ns
        self.say = say  # (kind, line or callable): the owner's rate-limited line, or None
        self.counters = {
            "received": 0,
            "rejected": 0,
            "oversize": 0,
            "superseded": 0,
            "dropped_for_age": 0,
        }
        self._by_bytes = {t.encode(): t for t in topics}
        self._max_bytes = max_bytes
        self._count_key = {t: f"received.{t}" for t in topics}  # no per-message f-string
        self.counters.update(dict.fromkeys(self._count_key.values(), 0))
        self._last: dict[str, Envelope] = {}
        self._clock = clock

    def admit(self, topic_b: bytes, views: list) -> Envelope | None:
        """One message's topic frame and [envelope, *array frames]: Envelope or None (counted)."""
        topic = self._by_bytes.get(topic_b)
        dest: str | None = None
        if topic is None:
            topic, dest = parse_addressed(topic_b, self._by_bytes, self._to)
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
        except WireError as e:
            self.refuse(str(e))
            return None
        if env.topic != topic or not dest_ok(env.body, dest):
            self.counters["rejected"] += 1
            return None
        now = self._clock()
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

    def reject(self) -> None:
        """Count a message that is no envelope at all (a lone frame), silently."""
        self.counters["rejected"] += 1

    def refuse(self, why: str) -> None:
        """Count a message the wire refused, and tell ``say`` why (one rate-limited line)."""
        self.counters["rejected"] += 1
        if self.say is not None:
            self.say(
                "rejected",
                lambda: (
                    f"a message of {'/'.join(self.topics)} refused "
                    f"by the wire ({why}); fix its sender"
                ),
            )

    def last(self, topic: str) -> Envelope | None:
        """The newest message of ``topic`` admitted so far (handed out or not)."""
        return self._last.get(topic)


def left_ms(deadline: int | None, timeout_ms: int) -> int:
    """Milliseconds left to wait (-1: forever, 0: time is up), rounded up."""
    if deadline is None:
        return -1 if timeout_ms < 0 else 0
    return max(0, -(-(deadline - now_ns()) // 1_000_000))  # ceil: a sub-ms rest still waits
