"""LatencyHistogram.percentiles_us gives exactly what hdrh's own percentile walk gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rtinfer.realtime.hist import PERCENTILES, LatencyHistogram

latencies = st.lists(st.integers(min_value=-5, max_value=20_000_000_000), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(latencies)
def test_percentiles_match_hdrh_for_any_recorded_values(values):
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    ours = h.percentiles_us()
    theirs = h._h.get_percentile_to_value_dict([p for _, p in PERCENTILES])
    assert {name: ours[name] for name, _ in PERCENTILES} == {
        name: theirs[p] / 1e3 for name, p in PERCENTILES
    }
    assert ours["count"] == len(values)


def test_an_empty_histogram_reports_zeros():
    assert set(LatencyHistogram().percentiles_us().values()) == {0.0}


@settings(max_examples=50, deadline=None)
@given(latencies, latencies)
def test_a_reset_histogram_is_a_fresh_one(before, after):
    used, fresh = LatencyHistogram(), LatencyHistogram()
    for v in before:
        used.record(v)
    used.reset()
    assert used.count == 0 and used.clamped == 0
    for v in after:
        used.record(v)
        fresh.record(v)
    assert used.percentiles_us() == fresh.percentiles_us()
    assert used.encode() == fresh.encode()
