"""NodeHealth: the inference node's counters, latency histograms and health timing.

`counters` are the node's own (cycles, bad and held observations, frames, released robots,
chunks not finite in a row); `record()` takes one answered cycle's stamps into the ttft,
per_token and cycle histograms (compute: `record_compute()`), `broken` says the policy's
last BROKEN_AFTER chunks were not finite, `due(now)` whether the next `health` message is
(at health_hz), and `body()` the health message the node's parts fill. Not thread-safe.
"""

from __future__ import annotations

from rtinfer.model.obs_spec import FRAME_COUNTERS
from rtinfer.realtime.hist import LatencyHistogram

BROKEN_AFTER = 10  # cycles in a row whose chunk was not finite: the policy is broken
HISTOGRAMS = ("ttft", "per_token", "cycle", "compute")


class NodeHealth:
    def __init__(self, name: str, health_hz: float):
        self.name = name
        self.period_ns = int(1e9 / health_hz)
        self.hist = {k: LatencyHistogram() for k in HISTOGRAMS}
        self.counters = dict.fromkeys(
            (
                "cycles",
                "obs_bad",
                *FRAME_COUNTERS,
                "obs_held",
                "chunks_not_finite_in_a_row",
                "robots_released",
            ),
            0,
        )
        self.next_ns = 0  # when the next health message is due

    def due(self, now: int) -> bool:
        """True (and the next one scheduled) when a health message is due at `now`."""
        if now < self.next_ns:
            return False
        self.next_ns = now + self.period_ns
        return True

    def record_compute(self, ns: int) -> None:
        self.hist["compute"].record(ns)

    def record(self, t_recv: int, t_first: int, t_end: int, n: int, dropped: bool) -> bool:
        """One answered cycle of n waypoints (its chunk dropped: not finite). True when the
        policy is broken (BROKEN_AFTER dropped in a row)."""
        c = self.counters
        c["cycles"] += 1
        c["chunks_not_finite_in_a_row"] = c["chunks_not_finite_in_a_row"] + 1 if dropped else 0
        self.hist["ttft"].record(t_first - t_recv)
        self.hist["per_token"].record((t_end - t_first) // max(n - 1, 1))
        self.hist["cycle"].record(t_end - t_recv)
        return c["chunks_not_finite_in_a_row"] >= BROKEN_AFTER

    @property
    def broken(self) -> bool:
        return self.counters["chunks_not_finite_in_a_row"] >= BROKEN_AFTER

    def body(self, state: str, counters: dict, gauges: dict) -> dict:
        """`health` body: these counters after the node's own, the latency gauges (us, p50
        and p99 of each histogram) before `gauges`."""
        c = {**self.counters, **counters, "policy_broken": int(self.broken)}
        g = {
            f"{k}_p{p}_us": float(self.hist[k].percentiles_us()[f"p{p}"])
            for k in self.hist
            for p in (50, 99)
        }
        return {"node": self.name, "state": state, "counters": c, "gauges": {**g, **gauges}}
