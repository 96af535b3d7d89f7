"""Rich tables for benchmark results."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def print_result(what: str, result: dict, console: Console | None = None) -> None:
    console = console or Console()
    if what == "transport":
        t = Table(
            title=f"transport: one-way latency, {result['payload_bytes']} B action chunk, "
            f"{result['messages_per_path']} msgs/path at {result['rate_hz']:.0f} Hz"
        )
        for col in (
            "endpoint",
            "rtinfer p50 us",
            "raw p50 us",
            "ratio p50",
            "added p50 us",
            "rtinfer p99 us",
            "raw p99 us",
            "ratio p99",
        ):
            t.add_column(col, justify="right")
        for kind in ("ipc", "tcp"):
            r = result[kind]
            t.add_row(
                kind,
                f"{r['rtinfer_p50_us']:.1f}",
                f"{r['raw_p50_us']:.1f}",
                f"{r['ratio_p50']:.2f}",
                f"{r['added_p50_us']:.1f}",
                f"{r['rtinfer_p99_us']:.1f}",
                f"{r['raw_p99_us']:.1f}",
                f"{r['ratio_p99']:.2f}",
            )
    else:
        t = Table(
            title=f"jitter: {result['hz']:.0f} Hz loop lateness, "
            f"{result['ticks_per_loop']} ticks/loop"
        )
        for col in ("loop", "p50 us", "p99 us", "p99.9 us", "max us", "rate error"):
            t.add_column(col, justify="right")
        for name in ("ratekeeper", "naive"):
            t.add_row(
                name,
                f"{result[name + '_p50_us']:.1f}",
                f"{result[name + '_p99_us']:.1f}",
                f"{result[name + '_p999_us']:.1f}",
                f"{result[name + '_max_us']:.1f}",
                f"{result[name + '_rate_error'] * 100:+.2f}%",
            )
        t.caption = f"ratio p99 (ratekeeper / naive) = {result['ratio_p99']}"
    console.print(t)
