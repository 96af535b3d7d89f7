"""Liveliness, the one freshness mechanism: age, alive, missed periods, deaths, rate.

Every arrival time is passed in, so each boundary is exact. (These ran over real sockets
while the Subscriber kept a Liveliness of its own; only tests used it, so it went.)
"""

import pytest

from rtinfer.transport.liveliness import Liveliness

MS = 1_000_000


def test_rate_and_age_follow_the_arrival_clock():
    live = Liveliness(alive_periods=2.0, alpha=0.5)
    for k in range(10):
        live.note("obs", k * 10 * MS)  # every 10 ms
    last = 90 * MS
    assert live.rate_hz("obs", now=last) == pytest.approx(100.0)
    assert live.alive("obs", period_ns=10 * MS, now=last + 19 * MS)
    assert not live.alive("obs", period_ns=10 * MS, now=last + 20 * MS)
    assert live.rate_hz("obs", now=last + 1_000 * MS) == pytest.approx(1.0)
    assert live.age_ns("obs", now=last + 5) == 5 and live.age_ns("x") is None


def test_alive_goes_false_after_the_publisher_stops():
    live = Liveliness(alive_periods=3.0)
    assert not live.alive("heartbeat", period_ns=50 * MS, now=0)
    for k in range(10):
        live.note("heartbeat", k * MS)
    assert live.alive("heartbeat", period_ns=50 * MS, now=10 * MS)  # younger than 150 ms
    assert not live.alive("heartbeat", period_ns=50 * MS, now=510 * MS)  # 0.5 s of silence
    assert not live.alive("budget", period_ns=1_000 * MS, now=510 * MS)  # never seen


def test_rate_hz_is_measured_and_decays_when_silent():
    live = Liveliness()
    t = 0
    while t < 1_000 * MS:  # 50 Hz for one second
        live.note("heartbeat", t)
        t += 20 * MS
    last = t - 20 * MS
    assert 15.0 < live.rate_hz("heartbeat", now=last) < 80.0
    assert live.rate_hz("heartbeat", now=last + 1_000 * MS) < 2.0
    assert live.rate_hz("budget", now=last) == 0.0


def test_a_stream_that_never_started_is_not_overdue():
    live = Liveliness()
    assert not live.overdue("chunk", 100 * MS, now=10**12)
    live.note("chunk", 0)
    assert not live.overdue("chunk", 100 * MS, now=100 * MS)  # exactly the timeout: on time
    assert live.overdue("chunk", 100 * MS, now=100 * MS + 1)


def test_silent_periods_are_counted_as_missed():
    live = Liveliness()
    live.note("infer", 0, period_ns=50 * MS)
    live.note("infer", 99 * MS, period_ns=50 * MS)  # under two periods: none missed
    assert live["infer"].missed == 0
    live.note("infer", 99 * MS + 200 * MS, period_ns=50 * MS)  # four periods: three missed
    assert live["infer"].missed == 3 and live["infer"].count == 3


def test_check_counts_each_death_once_and_reports_only_changes():
    live = Liveliness(alive_periods=3.0)
    live.note("infer", 0)
    assert live["infer"].alive  # alive when first heard
    assert not live.check("infer", 50 * MS, now=149 * MS)
    assert live.check("infer", 50 * MS, now=150 * MS)  # three periods silent: dead
    assert not live["infer"].alive and live["infer"].deaths == 1
    assert not live.check("infer", 50 * MS, now=900 * MS)  # still dead: no second death
    live.note("infer", 901 * MS)
    assert live.check("infer", 50 * MS, now=902 * MS)
    assert live["infer"].alive and live["infer"].deaths == 1


def test_streams_are_listed_in_the_order_first_heard():
    live = Liveliness()
    for key in ("b", "a", "b"):
        live.note(key, 0)
    assert list(live) == ["b", "a"] and "a" in live and "c" not in live and len(live) == 2


@pytest.mark.parametrize("kw", [{"alive_periods": 0}, {"alpha": 0.0}, {"alpha": 1.5}])
def test_bad_settings_are_rejected(kw):
    with pytest.raises(ValueError, match="alive_periods"):
        Liveliness(**kw)
