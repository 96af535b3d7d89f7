"""Freshness in one place: when each stream (a topic, a node) was last heard, how often,
and whether it is still alive. In the spirit of ROS 2 deadline/liveliness QoS and
openpilot's SubMaster ``alive`` / ``freq_ok``.

The controller's watchdog (its stream of fresh chunks) and the monitor (one stream per
node) both use it. Arrival times come from the monotonic clock of the receiving process
(``wire.now_ns``), so no cross-host clock is involved. Noting an arrival costs a few
integer and float operations and allocates nothing after a stream's first message.
Not thread-safe: owned by one loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from rtinfer.transport.wire import now_ns


class Stream:
    """What is known of one stream. Read the fields; only Liveliness writes them."""

    __slots__ = ("last_ns", "interval_ns", "count", "missed", "deaths", "alive")

    def __init__(self) -> None:
        self.last_ns = -1  # arrival of the newest message, -1 before the first
        self.interval_ns = 0.0  # EWMA of the inter-arrival time
        self.count = 0  # messages noted
        self.missed = 0  # expected periods that passed silently (ROS 2 deadline missed)
        self.deaths = 0  # alive -> dead changes seen by Liveliness.check
        self.alive = True  # as of the last check; a stream is alive when first heard


class Liveliness(Mapping[str, Stream]):
    """The streams heard so far: a read-only mapping key -> Stream, in the order first heard.

    alive_periods: a stream is alive while its newest message is younger than
        ``alive_periods * period_ns``.
    alpha: EWMA weight of the newest inter-arrival interval (0.1 ~ the last 10 messages).
    """

    def __init__(self, alive_periods: float = 3.0, alpha: float = 0.1) -> None:
        if not alive_periods > 0 or not 0.0 < alpha <= 1.0:
            raise ValueError(
                f"need alive_periods > 0 and alpha in (0, 1], got {alive_periods} "
                f"and {alpha}: a stream is alive while heard within alive_periods "
                f"periods"
            )
        self.alive_periods = alive_periods
        self.alpha = alpha
        self._streams: dict[str, Stream] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._streams

    def __getitem__(self, key: str) -> Stream:
        return self._streams[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

    def note(self, key: str, arrival_ns: int, period_ns: int = 0) -> None:
        """Record one message of ``key`` arriving at ``arrival_ns`` (monotonic ns).

        period_ns > 0: the expected period; a gap of k >= 2 periods counts k - 1 missed.
        """
        st = self._streams.get(key)
        if st is None:
            st = self._streams[key] = Stream()
        if st.count:
            dt = arrival_ns - st.last_ns
            st.interval_ns = (
                dt if st.count == 1 else st.interval_ns + self.alpha * (dt - st.interval_ns)
            )
            if period_ns > 0 and dt >= 2 * period_ns:
                st.missed += dt // period_ns - 1
        st.last_ns = arrival_ns
        st.count += 1

    def age_ns(self, key: str, now: int | None = None) -> int | None:
        """Nanoseconds since the newest message of ``key``; None if none arrived."""
        st = self._streams.get(key)
        if st is None:
            return None
        return (now_ns() if now is None else now) - st.last_ns

    def alive(self, key: str, period_ns: int, now: int | None = None) -> bool:
        """Heard, and the newest message is younger than alive_periods * period_ns."""
        age = self.age_ns(key, now)
        return age is not None and age < self.alive_periods * period_ns

    def check(self, key: str, period_ns: int, now: int) -> bool:
        """Store alive() in ``live[key].alive``, counting a death when it turns false;
        True if it changed since the last check. ``key`` must have been noted."""
        st = self._streams[key]
        alive = self.alive(key, period_ns, now)
        if alive == st.alive:
            return False
        st.alive = alive
        st.deaths += not alive
        return True

    def overdue(self, key: str, timeout_ns: int, now: int | None = None) -> bool:
        """Heard at least once, and not within the last ``timeout_ns`` (a missed deadline:
        a stream that never started is not overdue)."""
        age = self.age_ns(key, now)
        return age is not None and age > timeout_ns

    def rate_hz(self, key: str, now: int | None = None) -> float:
        """Measured arrival rate in Hz; 0.0 until two messages arrived.

        The silence since the newest message counts as an interval once it is longer
        than the average, so the rate decays towards 0 when a publisher stops instead
        of freezing at its last value.
        """
        st = self._streams.get(key)
        if st is None or st.count < 2:
            return 0.0
        silence = (now_ns() if now is None else now) - st.last_ns
        interval = max(st.interval_ns, float(silence))
        return 1e9 / interval if interval > 0 else 0.0
