"""Watchdog freshness rules: stale captures, bogus future stamps, quiet streams (on Liveliness)."""

import pytest

from controllers.watchdog import Watchdog

MS = 1_000_000


def test_quiet_stream_expires_after_interval_plus_deadline():
    # 20 ms deadline, chunks due every 50 ms: a deadline shorter than the policy period
    # must not hold the robot between two on-time chunks.
    w = Watchdog(20 * MS, 50 * MS)
    assert not w.expired(0)  # never fed: nothing to expire
    w.feed(0)
    assert not w.expired(69 * MS)
    assert w.expired(71 * MS)
    w.feed(71 * MS)
    assert not w.expired(100 * MS)


def test_without_interval_the_deadline_alone_bounds_quiet_time():
    w = Watchdog(100 * MS)
    w.feed(0)
    assert not w.expired(100 * MS) and w.expired(101 * MS)


def test_capture_age_checks_use_the_deadline_only():
    w = Watchdog(20 * MS, 50 * MS)
    assert not w.too_old(0, 20 * MS) and w.too_old(0, 21 * MS)
    assert w.from_future(1, 0) and not w.from_future(0, 0)  # any capture in our future


@pytest.mark.parametrize("args", [(0,), (-1,), (10 * MS, -1)])
def test_bad_settings_are_rejected(args):
    with pytest.raises(ValueError):
        Watchdog(*args)


def test_last_fresh_time_is_the_newest_feed_and_none_before_any():
    w = Watchdog(20 * MS, 50 * MS)
    assert w.last_fresh_ns is None
    w.feed(5 * MS)
    w.feed(60 * MS)
    assert w.last_fresh_ns == 60 * MS


def test_a_capture_may_lead_our_clock_by_the_stated_uncertainty_only():
    w = Watchdog(100 * MS, 50 * MS, uncertainty_ns=2 * MS)
    assert not w.from_future(2 * MS, 0) and w.from_future(2 * MS + 1, 0)
    assert w.from_future(5 * MS, 0)  # the review's +5 ms: bogus, whatever the deadline


def test_a_clock_uncertainty_is_never_the_deadline():
    from conftest import gantry_control

    from controllers.node import ControllerConfig
    from rtinfer.model.action_tokens import TokenizerConfig

    tok = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0))
    with pytest.raises(
        ValueError, match="clock_uncertainty_ns=100000000 must be >= 0 and below the deadline"
    ):
        ControllerConfig(gantry_control(), tokenizer=tok, clock_uncertainty_ns=100 * MS)
