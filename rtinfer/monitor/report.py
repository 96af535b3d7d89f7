"""`rtinfer report TRACE [--png OUT]`: per-stage latency table from a trace file.

Each record's `stamps` (monotonic ns; see rtinfer.transport.wire) give a stage latency
wherever both of its stamps exist, by the monitor's own definitions (rtinfer.monitor.stages):
a late waypoint's record is a miss, not a stage sample; a sample outside [0, MAX_NS] is
counted as clamped; a percentile is the sample at stages.rank. The trace's stamps are
compared as they are (one host; the monitor corrects only a cross-host offset it can tell
from 0). Records are not merged across nodes. rich
and matplotlib are imported lazily: this module is for people, not the loop.
Exit codes: 0 ok, 1 table printed but the PNG could not be written,
2 unreadable/empty trace or no stage could be computed.
"""

from __future__ import annotations

import os

import numpy as np

from rtinfer.monitor.stages import (
    DEFINITIONS,
    MAX_NS,
    STAGES,
    is_late,
    past_deadline,
    rank,
    stage_samples,
)
from rtinfer.realtime.trace import read_trace

COLUMNS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))
START = {name: a for name, a, _ in STAGES}  # each stage's start stamp (the PNG's time axis)


def stage_latencies(
    records, late: list | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """Per stage: (latencies ns int64, start stamps ns int64), and the record count. Records
    of late waypoints give no stage sample; they are appended to `late` when given."""
    lat: dict[str, list[int]] = {name: [] for name, _, _ in STAGES}
    start: dict[str, list[int]] = {name: [] for name, _, _ in STAGES}
    n = 0
    for rec in records:
        n += 1
        stamps = rec.get("stamps")
        if not isinstance(stamps, dict):
            continue
        if is_late(rec):
            if late is not None:
                late.append(rec)
            continue
        for name, ns in stage_samples(stamps):
            lat[name].append(ns)
            start[name].append(stamps[START[name]])
    as_arr = lambda d: {k: np.asarray(v, dtype=np.int64) for k, v in d.items() if v}  # noqa: E731
    return as_arr(lat), as_arr(start), n


def cycle_counts(records, deadline_ns: int | None = None) -> dict[str, int]:
    """The monitor's cycles and misses (stages.DEFINITIONS) on the trace's stamps as they
    are: distinct (node, cycle id, capture) with a late record (capture and recv) or an
    applied one (capture and apply); a cycle is missed when any record of it is late
    (never applied, whatever its age: a chunk dropped at apply time too) or, with
    deadline_ns, its e2e is above that."""
    missed: dict[tuple, bool] = {}
    for rec in records:
        st = rec.get("stamps")
        if not isinstance(st, dict):
            continue
        late = is_late(rec)
        cap, end = st.get("capture"), st.get("recv" if late else "apply")
        if not (isinstance(cap, int) and isinstance(end, int)):
            continue
        key = (rec.get("node"), rec.get("cycle"), cap)
        miss = late or (deadline_ns is not None and past_deadline(rec, end - cap, deadline_ns))
        missed[key] = missed.get(key, False) or miss
    return {"cycles": len(missed), "misses": sum(missed.values())}


def summarize(lat_ns: np.ndarray) -> dict[str, float]:
    """count, clamped and p50/p90/p99/p99.9/max in milliseconds (exact samples, not binned;
    clamped to [0, MAX_NS] and ranked as the monitor's histograms are)."""
    ns = np.sort(lat_ns)
    clamped = int(np.count_nonzero((ns < 0) | (ns > MAX_NS)))
    ms = np.clip(ns, 0, MAX_NS) / 1e6
    out = {col: float(ms[rank(pct, ms.size) - 1]) for col, pct in COLUMNS}
    out["max"] = float(ms[-1])
    out["count"] = float(ms.size)
    out["clamped"] = float(clamped)
    return out


def _print_table(
    path: str,
    n_records: int,
    lat: dict[str, np.ndarray],
    n_late: int,
    counts: dict[str, int],
    deadline_ms: float | None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    past = (
        f"e2e above {deadline_ms:g} ms"
        if deadline_ms is not None
        else "give --deadline-ms to count applied cycles past it too"
    )
    table = Table(
        title=f"{os.path.basename(path)}: {n_records} records, latency in ms",
        caption=f"cycles {counts['cycles']}, misses {counts['misses']} (late, or "
        f"{past}); {n_late} late-waypoint records: never applied, in no "
        f"stage. clamped: {DEFINITIONS['clamped']}",
    )
    table.add_column("stage")
    for col in ("count", "clamped", *(c for c, _ in COLUMNS), "max"):
        table.add_column(col, justify="right")
    for name, _, _ in STAGES:
        if name in lat:
            s = summarize(lat[name])
            cells = [f"{s[c]:.3f}" for c, _ in COLUMNS] + [f"{s['max']:.3f}"]
            table.add_row(name, str(int(s["count"])), str(int(s["clamped"])), *cells)
    Console().print(table)


def write_png(png: str, lat: dict[str, np.ndarray], start: dict[str, np.ndarray]) -> None:
    """Timeline (latency vs time since the first stamp) and histogram per stage."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    names = [name for name, _, _ in STAGES if name in lat]
    fig = Figure(figsize=(11, 2.6 * len(names)), layout="constrained")
    FigureCanvasAgg(fig)
    t_origin = min(int(v.min()) for v in start.values())
    axes = fig.subplots(len(names), 2, squeeze=False)
    for row, name in zip(axes, names):
        ms = lat[name] / 1e6
        row[0].plot((start[name] - t_origin) / 1e9, ms, ".", markersize=2)
        row[0].set(title=f"{name} timeline", xlabel="s since first stamp", ylabel="ms")
        row[1].hist(ms, bins=min(100, max(10, ms.size // 10)))
        row[1].set(title=f"{name} histogram", xlabel="ms", ylabel="cycles")
    fig.savefig(png, dpi=100)


def main(
    trace_path: str, png: str | None = None, deadline_ms: float | None = None, read=read_trace
) -> int:
    """Print the latency table for `trace_path` (with its cycles and misses, by the monitor's
    definition; deadline_ms: the deadline applied cycles are held to); write `png` if given.
    read: path -> trace records (a recording's: rtinfer.record.read.read_traces). Returns an
    exit code."""
    late: list[dict] = []
    try:
        records = list(read(trace_path))
        lat, start, n = stage_latencies(records, late)
    except (OSError, ValueError) as exc:
        print(f"rtinfer report: cannot read trace {trace_path!r}: {exc}")
        return 2
    if n == 0:
        print(f"rtinfer report: trace {trace_path!r} holds no records")
        return 2
    if not lat:
        pairs = ", ".join(f"{a}->{b}" for _, a, b in STAGES)
        print(f"rtinfer report: {n} records in {trace_path!r} but none has a stamp pair ({pairs})")
        return 2
    counts = cycle_counts(records, None if deadline_ms is None else int(deadline_ms * 1e6))
    _print_table(trace_path, n, lat, len(late), counts, deadline_ms)
    if png is None:
        return 0
    try:
        write_png(png, lat, start)
    except ImportError as exc:
        print(f"rtinfer report: PNG not written, matplotlib is unavailable ({exc})")
        return 1
    except OSError as exc:
        print(f"rtinfer report: PNG not written to {png!r}: {exc}")
        return 1
    print(f"wrote {png}")
    return 0
