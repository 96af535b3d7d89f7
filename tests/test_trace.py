"""Trace files (msgpack stream, crash-safe reading) and the `rtinfer report` table/PNG."""

import subprocess
import sys

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.monitor import report
from rtinfer.realtime.trace import TraceWriter, read_trace

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _record(cycle: int, **stamps) -> dict:
    return {"node": "test", "cycle": cycle, "stamps": stamps, "fields": {"slack_ms": 1.5}}


def _write(path, records, **kw):
    with TraceWriter(path, **kw) as tw:
        for r in records:
            tw.write(r)
    return tw


# -------------------------------------------------------------------- trace


def test_trace_round_trips_records_in_order(tmp_path):
    records = [_record(i, capture=i * 1000, apply=i * 1000 + 7) for i in range(1000)]
    tw = _write(tmp_path / "t.msgpack", records, flush_every=64)
    assert tw.written == 1000 and tw.dropped == 0
    assert list(read_trace(tmp_path / "t.msgpack")) == records


records_st = st.lists(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(
            st.integers(-(2**63), 2**64 - 1),
            st.floats(allow_nan=False),
            st.text(max_size=8),
            st.dictionaries(st.text(max_size=4), st.integers(0, 2**63 - 1), max_size=4),
        ),
        max_size=6,
    ),
    max_size=20,
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records_st)
def test_any_msgpack_record_round_trips(tmp_path, records):
    _write(tmp_path / "p.msgpack", records)
    assert list(read_trace(tmp_path / "p.msgpack")) == records


def test_numpy_scalars_and_arrays_are_written_as_plain_values(tmp_path):
    rec = {
        "stamps": {"capture": np.int64(5)},
        "fields": {"x": np.float32(0.5)},
        "v": np.arange(3, dtype=np.int16),
    }
    _write(tmp_path / "n.msgpack", [rec])
    assert list(read_trace(tmp_path / "n.msgpack")) == [
        {"stamps": {"capture": 5}, "fields": {"x": 0.5}, "v": [0, 1, 2]}
    ]


def test_unpackable_record_is_dropped_and_counted_not_raised(tmp_path):
    tw = _write(tmp_path / "d.msgpack", [_record(0), {"bad": object()}, _record(1)])
    assert tw.dropped == 1 and tw.written == 2
    assert [r["cycle"] for r in read_trace(tmp_path / "d.msgpack")] == [0, 1]


def test_truncated_last_record_is_ignored_at_every_cut(tmp_path):
    path = tmp_path / "c.msgpack"
    records = [_record(i, capture=i, apply=i + 1) for i in range(10)]
    _write(path, records)
    data = path.read_bytes()
    last = len(msgpack.packb(records[-1]))
    for cut in range(1, last):
        path.write_bytes(data[:-cut])
        assert list(read_trace(path)) == records[:-1]


def test_corrupt_bytes_mid_file_raise_value_error(tmp_path):
    path = tmp_path / "x.msgpack"
    path.write_bytes(msgpack.packb(_record(0)) + b"\xc1" * 8 + msgpack.packb(_record(1)))
    with pytest.raises(ValueError, match="corrupt"):
        list(read_trace(path))


def test_missing_trace_raises_at_call_time(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "nope.msgpack")


def test_a_crashed_writer_leaves_every_flushed_record_readable(tmp_path):
    path = tmp_path / "crash.msgpack"
    code = (
        "import os, sys\n"
        "from rtinfer.realtime.trace import TraceWriter\n"
        "tw = TraceWriter(sys.argv[1], flush_every=10)\n"
        "for i in range(25): tw.write({'cycle': i, 'stamps': {'capture': i}})\n"
        "os._exit(3)  # no close(): the last 5 records were never flushed\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60)
    assert proc.returncode == 3
    assert [r["cycle"] for r in read_trace(path)] == list(range(20))


# ------------------------------------------------------------------- report


def _synthetic_trace(path, n=400):
    rng = np.random.default_rng(1)
    records = []
    for i in range(n):
        cap = 1_000_000_000 + i * 50_000_000
        obs_recv = cap + int(rng.integers(100_000, 300_000))
        first = obs_recv + int(rng.integers(20_000_000, 40_000_000))
        pub = first + 50_000
        recv = pub + int(rng.integers(30_000, 90_000))
        stamps = dict(capture=cap, obs_recv=obs_recv, first_token=first, publish=pub, recv=recv)
        if i % 2 == 0:  # only every other cycle was applied
            stamps["apply"] = recv + 1_000_000
        records.append(_record(i, **stamps))
    _write(path, records)


def test_report_prints_stage_table_and_writes_png(tmp_path, capsys):
    trace, png = tmp_path / "run.msgpack", tmp_path / "latency.png"
    _synthetic_trace(trace)
    assert report.main(str(trace), png=str(png)) == 0
    out = capsys.readouterr().out
    for stage in ("e2e", "ttft", "transport", "apply_delay", "obs_transport"):
        assert stage in out
    assert "200" in out and "400" in out  # e2e only where apply exists
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_stage_latencies_use_only_records_with_both_stamps(tmp_path):
    trace = tmp_path / "s.msgpack"
    _synthetic_trace(trace, n=10)
    lat, _start, n = report.stage_latencies(read_trace(trace))
    assert n == 10 and lat["e2e"].size == 5 and lat["ttft"].size == 10
    assert (lat["apply_delay"] == 1_000_000).all()
    assert report.summarize(lat["apply_delay"])["p99"] == pytest.approx(1.0)


def test_report_on_missing_file_returns_2(tmp_path, capsys):
    assert report.main(str(tmp_path / "missing.msgpack")) == 2
    assert "cannot read trace" in capsys.readouterr().out


def test_report_on_empty_or_stampless_trace_returns_2(tmp_path, capsys):
    (tmp_path / "empty.msgpack").write_bytes(b"")
    assert report.main(str(tmp_path / "empty.msgpack")) == 2
    _write(tmp_path / "nostamps.msgpack", [{"cycle": 1}, {"cycle": 2, "stamps": {"capture": 1}}])
    assert report.main(str(tmp_path / "nostamps.msgpack")) == 2
    out = capsys.readouterr().out
    assert "no records" in out and "none has a stamp pair" in out


def test_report_on_unwritable_png_path_prints_table_and_returns_1(tmp_path, capsys):
    trace = tmp_path / "run.msgpack"
    _synthetic_trace(trace, n=20)
    assert report.main(str(trace), png=str(tmp_path / "no" / "such" / "dir.png")) == 1
    assert "e2e" in capsys.readouterr().out


def test_a_full_disk_stops_the_trace_with_one_line_and_counts_what_was_lost(tmp_path, capfd):
    """/dev/full fails every write with ENOSPC, as a full disk does: the writer neither
    raises nor retries; it says so once and counts every record it did not write."""
    tw = TraceWriter("/dev/full", flush_every=4)
    for i in range(100):
        tw.write(_record(i, capture=i, apply=i + 1))
    tw.close()
    tw.close()
    err = capfd.readouterr().err.splitlines()
    assert tw.failed == "No space left on device" and tw.written == 0 and tw.lost == 100
    assert len(err) == 2 and "trace writing stopped" in err[0], err
    assert "100 records not written" in err[1], err


def test_a_trace_that_fills_its_disk_keeps_exactly_the_records_it_counts_written(tmp_path):
    """A 16 KiB tmpfs: the writer fails part-way through a flush; the file is cut back to the
    last whole flush, so it holds exactly `written` records and `lost` counts the rest."""
    import os
    import shutil
    import subprocess as sp

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    d = tmp_path / "small"
    d.mkdir()
    if sp.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(d)]).returncode != 0:
        pytest.skip("mount -t tmpfs refused")
    try:
        tw = TraceWriter(d / "t.trace", flush_every=8)
        for i in range(2000):
            tw.write(_record(i, capture=i, apply=i + 1))
        tw.close()
        got = list(read_trace(d / "t.trace"))
        assert tw.failed and tw.written > 0 and tw.written + tw.lost == 2000
        assert got == [_record(i, capture=i, apply=i + 1) for i in range(tw.written)]
    finally:
        sp.run(["umount", "-l", str(d)])  # lazy: a file a failed run left open
