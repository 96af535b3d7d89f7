"""RateKeeper schedule, configure_realtime's best-effort setup, and LatencyHistogram.

Timing checks here are lower bounds the schedule guarantees (a deadline is never
met early) or very generous upper bounds; no `elapsed < tiny` assertions.
"""

import gc
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.os_setup import configure_realtime, realtime_gc
from rtinfer.realtime.rate import RateKeeper
from rtinfer.realtime.spin import spin

STEPS = {"affinity", "scheduler", "gc", "mlockall"}


# ---------------------------------------------------------------- RateKeeper


def test_rate_keeper_holds_the_long_run_rate():
    t0 = time.monotonic()
    rk = RateKeeper(500, "test")
    for _ in range(200):
        rk.keep_time()
    elapsed = time.monotonic() - t0
    assert rk.frame == 200
    assert elapsed >= 0.4  # 200 deadlines 2 ms apart are never met early
    assert elapsed < 2.0  # generous: a noisy VM, but no unbounded slip
    assert rk.lateness.count == 200


def test_rate_keeper_does_not_drift_when_the_body_takes_time():
    rk = RateKeeper(1000, "drift")
    t0 = time.monotonic_ns()
    for i in range(400):
        busy_until = time.monotonic_ns() + (i % 5) * 100_000  # 0..400 us of "work"
        while time.monotonic_ns() < busy_until:
            pass
        rk.keep_time()
    elapsed = time.monotonic_ns() - t0
    # Absolute schedule: elapsed periods == frames (+ frames skipped by re-anchoring);
    # each re-anchor may shift the grid by under one period, and nothing else accumulates.
    periods = elapsed / rk.period_ns
    slack = rk.reanchors + 1 + rk.lateness.percentiles_us()["max"] * 1e3 / rk.period_ns
    assert abs(periods - (rk.frame + rk.skipped_frames)) <= slack + 0.5


def test_stall_sets_lagging_and_reanchors_without_a_catch_up_burst():
    rk = RateKeeper(500, "stall")  # 2 ms period
    for _ in range(5):
        rk.keep_time()
    skipped, reanchors, late = rk.skipped_frames, rk.reanchors, rk.late_ticks
    time.sleep(0.020)  # the loop body stalls for 10 periods
    assert rk.keep_time() is True
    assert rk.lagging and rk.remaining < 0
    assert rk.late_ticks == late + 1 and rk.overruns >= 1
    assert rk.reanchors == reanchors + 1
    assert rk.skipped_frames - skipped >= 8  # >= 18 ms late at 2 ms a frame
    t = time.monotonic()
    for _ in range(5):
        rk.keep_time()
    # A catch-up burst would run these 5 ticks back to back; re-anchored, they take 5 periods.
    assert time.monotonic() - t >= 4 * 0.002


def test_lagging_clears_once_the_loop_is_back_on_time():
    rk = RateKeeper(200, "recover")
    time.sleep(0.030)
    assert rk.keep_time()
    assert any(not rk.keep_time() for _ in range(50))  # 50 chances on a noisy VM


def test_monitor_time_measures_without_sleeping():
    rk = RateKeeper(0.1, "monitor")  # 10 s period: keep_time would block 10 s
    t = time.monotonic()
    assert rk.monitor_time() is False  # the first tick sets the phase
    assert rk.monitor_time() is False
    assert rk.remaining > 5.0  # the second tick is ~one period early
    assert time.monotonic() - t < 5.0
    assert rk.frame == 2


def test_monitor_time_flags_a_late_tick():
    rk = RateKeeper(50, "monitor")  # 20 ms period
    rk.monitor_time()
    time.sleep(0.050)
    assert rk.monitor_time() is True
    assert rk.remaining < -0.02 and rk.skipped_frames >= 1


def test_rate_keeper_rejects_a_nonpositive_rate():
    with pytest.raises(ValueError):
        RateKeeper(0)


# --------------------------------------------------------- configure_realtime


def test_configure_realtime_never_raises_and_reports_each_step():
    affinity = os.sched_getaffinity(0)
    gc_enabled = gc.isenabled()
    try:
        result = configure_realtime(cpus=[0], priority=None, lock_memory=False)
        assert set(result) == STEPS
        assert all(isinstance(v, str) and v for v in result.values())
        assert result["affinity"] == ("ok" if 0 in affinity else result["affinity"])
        assert result["scheduler"].startswith("skipped")
        assert result["gc"] == "ok" and not gc.isenabled()
        refused = configure_realtime(cpus=[100_000], priority=100_000, lock_memory=False)
        assert refused["affinity"] != "ok" and refused["scheduler"] != "ok"
    finally:
        os.sched_setaffinity(0, affinity)
        gc.unfreeze()
        if gc_enabled:
            gc.enable()


def test_configure_realtime_in_a_fresh_process_logs_each_refusal_once():
    # All steps, SCHED_FIFO and mlockall included, run in a child so this process is untouched.
    code = (
        "import json, logging\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from rtinfer.realtime.os_setup import configure_realtime, DEFAULT_RT_PRIORITY\n"
        "ok = configure_realtime(cpus=[0], priority=DEFAULT_RT_PRIORITY, lock_memory=True)\n"
        "bad = [configure_realtime(cpus=[100000], priority=100000, lock_memory=False)"
        " for _ in range(3)]\n"
        "print(json.dumps({'ok': ok, 'bad': bad}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(out.stdout)
    assert set(result["ok"]) == STEPS
    assert all(isinstance(v, str) and v for v in result["ok"].values())
    assert all(b["affinity"] != "ok" and b["scheduler"] != "ok" for b in result["bad"])
    assert out.stderr.count("affinity refused") == 1
    assert out.stderr.count("scheduler refused") == 1
    # each refusal says how to be granted it
    assert "nproc" in out.stderr and "CAP_SYS_NICE" in out.stderr


def test_realtime_gc_disables_and_restores_the_collector():
    was = gc.isenabled()
    with realtime_gc():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
    assert gc.isenabled() == was
    assert gc.get_freeze_count() == 0


def test_spin_freezes_what_exists_for_the_loops_life_and_keeps_the_collector_on():
    class Loop:  # a node paced by its input: spin's one contract
        running, seen = True, []

        def spin_once(self, timeout_ms):
            self.seen.append((gc.isenabled(), gc.get_freeze_count()))
            self.running = len(self.seen) < 3

        def stop(self):
            self.running = False

    assert gc.get_freeze_count() == 0
    loop, before = Loop(), object()
    spin(loop)
    assert len(loop.seen) == 3
    assert all(enabled for enabled, _ in loop.seen) == gc.isenabled()
    assert all(frozen > 0 for _, frozen in loop.seen)  # `before` among them
    assert gc.get_freeze_count() == 0 and before is not None  # thawed when the loop ends


# ------------------------------------------------------------ LatencyHistogram


def test_histogram_percentiles_match_numpy_within_hdr_precision():
    data = np.random.default_rng(7).lognormal(mean=13.0, sigma=1.0, size=50_000).astype(np.int64)
    h = LatencyHistogram()
    for v in data.tolist():
        h.record(v)
    p = h.percentiles_us()
    assert p["count"] == data.size
    for key, pct in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)):
        exact_us = np.percentile(data, pct, method="inverted_cdf") / 1e3
        assert p[key] == pytest.approx(exact_us, rel=2e-3)
    assert p["max"] == pytest.approx(data.max() / 1e3, rel=2e-3)


def test_empty_histogram_reports_zeros():
    assert LatencyHistogram().percentiles_us() == {
        "p50": 0.0,
        "p90": 0.0,
        "p99": 0.0,
        "p999": 0.0,
        "max": 0.0,
        "count": 0.0,
    }


def test_out_of_range_values_are_clamped_and_counted():
    h = LatencyHistogram(max_ns=1_000_000)
    h.record(-5)
    h.record(5_000_000)
    assert h.count == 2 and h.clamped == 2
    assert h.percentiles_us()["max"] == pytest.approx(1000.0, rel=2e-3)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10_000_000_000), max_size=200))
def test_histogram_encode_decode_round_trips(values):
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    back = LatencyHistogram.decode(h.encode())
    assert back.percentiles_us() == h.percentiles_us()


def test_histogram_decode_rejects_garbage():
    with pytest.raises(ValueError):
        LatencyHistogram.decode("not a histogram")


def test_merge_equals_recording_everything_in_one_histogram():
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for i in range(1, 2000):
        (a if i % 3 else b).record(i * 997)
        both.record(i * 997)
    a.merge(LatencyHistogram.decode(b.encode()))  # as a monitor merges shipped histograms
    assert a.percentiles_us() == both.percentiles_us()
    a.reset()
    assert a.count == 0
