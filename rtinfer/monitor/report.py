"""`rtinfer report TRACE [--png OUT]`: per-stage latency table from a trace file.

Each record's `stamps` (monotonic ns; see rtinfer.transport.wire) give a stage latency
wherever both of its stamps exist; records are not merged across nodes. rich
and matplotlib are imported lazily: this module is for people, not the loop.
Exit codes: 0 ok, 1 table printed but the PNG could not be written,
2 unreadable/empty trace or no stage could be computed.
"""
from __future__ import annotations

import os

import numpy as np

from rtinfer.monitor.stages import STAGES
from rtinfer.realtime.trace import read_trace

COLUMNS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))


def stage_latencies(records) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """Per stage: (latencies ns int64, start stamps ns int64), and the record count."""
    lat: dict[str, list[int]] = {name: [] for name, _, _ in STAGES}
    start: dict[str, list[int]] = {name: [] for name, _, _ in STAGES}
    n = 0
    for rec in records:
        n += 1
        stamps = rec.get("stamps")
        if not isinstance(stamps, dict):
            continue
        for name, a, b in STAGES:
            t0, t1 = stamps.get(a), stamps.get(b)
            if isinstance(t0, int) and isinstance(t1, int):
                lat[name].append(t1 - t0)
                start[name].append(t0)
    as_arr = lambda d: {k: np.asarray(v, dtype=np.int64) for k, v in d.items() if v}  # noqa: E731
    return as_arr(lat), as_arr(start), n


def summarize(lat_ns: np.ndarray) -> dict[str, float]:
    """count and p50/p90/p99/p99.9/max in milliseconds (exact, not binned)."""
    ms = lat_ns / 1e6
    out = {col: float(np.percentile(ms, pct)) for col, pct in COLUMNS}
    out["max"] = float(ms.max())
    out["count"] = float(ms.size)
    return out


def _print_table(path: str, n_records: int, lat: dict[str, np.ndarray]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{os.path.basename(path)}: {n_records} records, latency in ms")
    table.add_column("stage")
    for col in ("count", *(c for c, _ in COLUMNS), "max"):
        table.add_column(col, justify="right")
    for name, _, _ in STAGES:
        if name in lat:
            s = summarize(lat[name])
            cells = [f"{s[c]:.3f}" for c, _ in COLUMNS] + [f"{s['max']:.3f}"]
            table.add_row(name, str(int(s["count"])), *cells)
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


def main(trace_path: str, png: str | None = None) -> int:
    """Print the latency table for `trace_path`; write `png` if given. Returns an exit code."""
    try:
        lat, start, n = stage_latencies(read_trace(trace_path))
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
    _print_table(trace_path, n, lat)
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
