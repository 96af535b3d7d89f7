"""The network of a lockstep run, in sim time (examples.conveyor_sorting.rtc_lockstep).

SimClock is the run's one clock, advanced a tick at a time by its loop. DelayLine stands for a
bus socket pair with a delay between: publish() encodes each message with the wire codec and
queues its bytes for delay_ns of sim time (plus a seeded uniform jitter, so waypoints may be
reordered, as the delay proxy does in real time); recv() decodes the first one due, stamped
"recv" on the sim clock, the surface a ControllerNode or the node's parts read. Not
thread-safe.
"""

from __future__ import annotations

import heapq

import numpy as np

from rtinfer.transport.wire import decode, encode

T0_NS = 1_000_000_000  # the sim clock's start (stamps are positive)


class SimClock:
    """The one clock of a lockstep run: ns, advanced a tick at a time by the loop."""

    def __init__(self, t0_ns: int = T0_NS):
        self.now_ns = t0_ns

    def __call__(self) -> int:
        return self.now_ns


class DelayLine:
    """A bus socket pair in one: publish() encodes with the wire codec and queues the bytes
    for delay_ns (+ uniform jitter in [0, jitter_ns], seeded) of sim time; recv() decodes the
    first one due, stamped "recv". Only `topics` are carried (the rest are accepted, as a
    subscriber on other topics would ignore them)."""

    def __init__(
        self,
        src: str,
        clock: SimClock,
        topics: set[str],
        delay_ns: int,
        jitter_ns: int = 0,
        seed: int = 0,
    ):
        self.src, self.clock, self.topics = src, clock, topics
        self.delay_ns, self.jitter_ns = delay_ns, jitter_ns
        self.rng = np.random.default_rng(seed)
        self.counters = {"sent": 0, "dropped": 0}
        self._queue: list[tuple[int, int, bytes]] = []
        self._seq = 0
        self.tap = None  # called with each message delivered (the bench's recorder)

    def publish(
        self, topic: str, body: dict, stamps: dict | None = None, to: str | None = None
    ) -> bool:
        st = dict(stamps or {})
        st.setdefault("publish", self.clock())
        data = encode(topic, body, seq=self._seq, src=self.src, stamps=st)
        self._seq += 1
        self.counters["sent"] += 1
        if topic in self.topics:
            jitter = int(self.rng.uniform(0, self.jitter_ns)) if self.jitter_ns else 0
            heapq.heappush(self._queue, (self.clock() + self.delay_ns + jitter, self._seq, data))
        return True

    def recv(self, timeout_ms: int = 0):
        if not self._queue or self._queue[0][0] > self.clock():
            return None
        env = decode(heapq.heappop(self._queue)[2])
        env.stamps["recv"] = self.clock()
        if self.tap is not None:
            self.tap(env)
        return env

    def close(self) -> None:
        self._queue.clear()
