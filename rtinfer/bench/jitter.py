"""1 kHz loop timing: RateKeeper (with configure_realtime) vs a naive `time.sleep(period)` loop.

Both loops do the same small PID-sized piece of work per tick and run alternately in the same
process (A B A B). Lateness is measured the same way for both: how late each tick woke
relative to the time it meant to wake. For RateKeeper that is the absolute schedule; for the
naive loop it is `sleep start + requested period` (its schedule also drifts, reported apart).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from rtinfer.bench.options import emit, parser
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.os_setup import DEFAULT_RT_PRIORITY, configure_realtime
from rtinfer.realtime.rate import RateKeeper


def _work(state: np.ndarray, out: np.ndarray) -> None:
    np.multiply(state, 0.5, out=out)
    np.add(out, state, out=out)


def _ratekeeper_block(hz: float, ticks: int, hist: LatencyHistogram) -> float:
    state, out = np.ones(3), np.empty(3)
    rk = RateKeeper(hz, name="bench")
    t0 = time.monotonic_ns()
    for _ in range(ticks):
        _work(state, out)
        rk.keep_time()
    elapsed = time.monotonic_ns() - t0
    hist.merge(rk.lateness)
    return elapsed / 1e9


def _naive_block(hz: float, ticks: int, hist: LatencyHistogram) -> float:
    state, out = np.ones(3), np.empty(3)
    period = 1.0 / hz
    period_ns = int(period * 1e9)
    t0 = time.monotonic_ns()
    for _ in range(ticks):
        _work(state, out)
        before = time.monotonic_ns()
        time.sleep(period)
        hist.record(max(0, time.monotonic_ns() - before - period_ns))
    return (time.monotonic_ns() - t0) / 1e9


def run(seconds: float = 5.0, hz: float = 1000.0, blocks: int = 5) -> dict:
    """Run each loop for `seconds` in total, alternated in `blocks`; percentiles in us."""
    # SCHED_FIFO where permitted (as a launch file would run a control loop); the naive loop
    # runs in the same process afterwards, so it gets the same scheduling: only pacing differs.
    steps = configure_realtime(cpus=None, priority=DEFAULT_RT_PRIORITY)
    ticks = max(1, int(seconds * hz / blocks))
    rk_hist, naive_hist = LatencyHistogram(), LatencyHistogram()
    rk_s = naive_s = 0.0
    for _ in range(blocks):
        rk_s += _ratekeeper_block(hz, ticks, rk_hist)
        naive_s += _naive_block(hz, ticks, naive_hist)
    rk, nv = rk_hist.percentiles_us(), naive_hist.percentiles_us()
    ideal = blocks * ticks / hz
    return {
        "hz": hz,
        "ticks_per_loop": blocks * ticks,
        "blocks": blocks,
        "cpus": os.cpu_count(),
        "realtime_config": steps,
        "ratekeeper_p50_us": rk["p50"],
        "ratekeeper_p99_us": rk["p99"],
        "ratekeeper_p999_us": rk["p999"],
        "ratekeeper_max_us": rk["max"],
        "naive_p50_us": nv["p50"],
        "naive_p99_us": nv["p99"],
        "naive_p999_us": nv["p999"],
        "naive_max_us": nv["max"],
        "ratio_p99": round(rk["p99"] / nv["p99"], 3) if nv["p99"] else None,
        "ratio_p999": round(rk["p999"] / nv["p999"], 3) if nv["p999"] else None,
        "ratekeeper_rate_error": round(rk_s / ideal - 1.0, 4),
        "naive_rate_error": round(naive_s / ideal - 1.0, 4),
    }


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench jitter`: 1 kHz loop lateness, RateKeeper against a naive sleep loop."""
    p = parser("jitter", main.__doc__)
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per loop")
    p.add_argument("--hz", type=float, default=1000.0, help="loop rate")
    a = p.parse_args(argv)
    return emit("jitter", run(seconds=a.seconds, hz=a.hz), a.json, table=True)


if __name__ == "__main__":
    sys.exit(main())
