"""Per-topic liveliness and rate, in the spirit of ROS 2 deadline/liveliness QoS and
openpilot's SubMaster ``alive`` / ``freq_ok``.

Arrival times come from the monotonic clock of the receiving process (``wire.now_ns``),
so no cross-host clock is involved. Updating a topic costs a few float operations and
allocates no lists or dicts per message. Not thread-safe: owned by one Subscriber.
"""
from __future__ import annotations

from rtinfer.transport.wire import now_ns


class _TopicState:
    __slots__ = ("last_ns", "interval_ns", "count")

    def __init__(self) -> None:
        self.last_ns = -1         # arrival of the newest message, -1 before the first
        self.interval_ns = 0.0    # EWMA of the inter-arrival time
        self.count = 0


class Liveliness:
    """Tracks the newest arrival and the arrival rate of each topic.

    alive_periods: a topic is alive while its newest message is younger than
        ``alive_periods * period_s``.
    alpha: EWMA weight of the newest inter-arrival interval (0.1 ~ the last 10 messages).
    """

    def __init__(self, alive_periods: float = 3.0, alpha: float = 0.1) -> None:
        if alive_periods <= 0 or not 0.0 < alpha <= 1.0:
            raise ValueError("alive_periods must be > 0 and alpha in (0, 1]")
        self.alive_periods = alive_periods
        self.alpha = alpha
        self._topics: dict[str, _TopicState] = {}

    def note(self, topic: str, arrival_ns: int) -> None:
        """Record one message of ``topic`` arriving at ``arrival_ns`` (monotonic ns)."""
        st = self._topics.get(topic)
        if st is None:
            st = self._topics[topic] = _TopicState()
        if st.last_ns >= 0:
            dt = arrival_ns - st.last_ns
            st.interval_ns = dt if st.count == 1 else st.interval_ns + self.alpha * (dt - st.interval_ns)
        st.last_ns = arrival_ns
        st.count += 1

    def age_ns(self, topic: str, now: int | None = None) -> int | None:
        """Nanoseconds since the newest message of ``topic``; None if none arrived."""
        st = self._topics.get(topic)
        if st is None:
            return None
        return (now_ns() if now is None else now) - st.last_ns

    def alive(self, topic: str, period_s: float, now: int | None = None) -> bool:
        """True if the newest message is younger than alive_periods * period_s."""
        age = self.age_ns(topic, now)
        return age is not None and age < self.alive_periods * period_s * 1e9

    def rate_hz(self, topic: str, now: int | None = None) -> float:
        """Measured arrival rate in Hz; 0.0 until two messages arrived.

        The silence since the newest message counts as an interval once it is longer
        than the average, so the rate decays towards 0 when a publisher stops instead
        of freezing at its last value.
        """
        st = self._topics.get(topic)
        if st is None or st.count < 2:
            return 0.0
        silence = (now_ns() if now is None else now) - st.last_ns
        interval = max(st.interval_ns, float(silence))
        return 1e9 / interval if interval > 0 else 0.0
