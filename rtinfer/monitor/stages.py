"""The figures of one run, each defined once: the monitor, `rtinfer report` and the dashboard
all compute them from here, from the stamps named in docs/wire.md.

A stage's latency is ``stamps[end] - stamps[start]`` (monotonic ns). Stamps taken on the
policy host are POLICY_STAMPS; every other stamp is taken on the robot host (the trace's
sender). On one host they are compared as they are; across hosts the monitor moves both
onto its own clock first (rtinfer.transport.peer_clock). A record of a late waypoint
(`is_late`) is a miss, never a stage sample. A sample outside [0, MAX_NS] is recorded at
that bound and counted as clamped. A percentile is the sample at `rank` (HdrHistogram's
rule, so the monitor's histogram and the report's exact arrays pick the same sample).
A fleet's figures are also kept per robot (RobotFigures, one per trace node): the fleet's
cycles and misses are the sums of the robots', its e2e samples the union of theirs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from rtinfer.realtime.hist import DEFAULT_MAX_NS, LatencyHistogram

# (stage, start stamp, end stamp)
STAGES = (
    ("e2e", "capture", "apply"),
    ("obs_transport", "capture", "obs_recv"),
    ("ttft", "obs_recv", "first_token"),
    ("transport", "publish", "recv"),
    ("apply_delay", "recv", "apply"),
)
POLICY_STAMPS = frozenset({"obs_recv", "first_token", "publish"})
MAX_NS = DEFAULT_MAX_NS  # a stage sample above this is a stall: recorded here, clamped

# What each figure counts, in one line: reports carry these, the dashboard labels by them.
DEFINITIONS = {
    "cycles": "observations answered: distinct cycles (node, cycle id, capture) with a "
    "controller trace record, applied or late, each counted once",
    "misses": "cycles past the deadline, each once: a cycle with a late record (a waypoint "
    "the controller dropped, never applied, so in no e2e sample, whatever its age: "
    "one that arrived late, or a chunk dropped at apply time) or e2e above the "
    "deadline; a chunk conditioned on the robot's committed prefix is held to its "
    "window instead where that is longer (fields.window_ms: fresh until its first "
    "waypoint not committed is due)",
    "e2e": "apply - capture of each applied chunk (late waypoints are misses, not e2e samples)",
    "clamped": f"stage samples below 0 (stamps on two clocks moved apart) or above "
    f"{MAX_NS / 1e9:g} s, recorded at that bound",
    "budget_requests": "budget level changes the monitor requested",
    "budget_changes": "budget level changes the policy node applied (its own and the "
    "monitor's; a --no-budget node applies none)",
    "robots": "per trace node (a robot's controller): its cycles, misses and e2e by the "
    "definitions above; the fleet's cycles and misses are their sums",
}


def is_late(record: Mapping) -> bool:
    """A trace record of a waypoint the controller dropped as late, never applied (a miss,
    whatever recv - capture says: a chunk dropped at apply time arrived in time)."""
    fields = record.get("fields")
    return isinstance(fields, Mapping) and fields.get("late_index") is not None


def past_deadline(record: Mapping, e2e_ns: int, deadline_ns: int) -> bool:
    """An applied cycle's e2e is past its deadline: the deadline, or a conditioned chunk's
    window (fields.window_ms, real-time chunking) where that is longer."""
    fields = record.get("fields")
    window = fields.get("window_ms", 0) if isinstance(fields, Mapping) else 0
    window_ns = window * 1e6 if isinstance(window, (int, float)) else 0
    return e2e_ns > deadline_ns and e2e_ns >= window_ns


def stage_samples(stamps: Mapping[str, int]) -> Iterator[tuple[str, int]]:
    """(stage, end - start ns) for every stage whose two stamps are both ints in `stamps`."""
    for name, a, b in STAGES:
        t0, t1 = stamps.get(a), stamps.get(b)
        if isinstance(t0, int) and isinstance(t1, int):
            yield name, t1 - t0


def rank(percentile: float, count: int) -> int:
    """1-based rank of the sample that is the `percentile` of `count` sorted samples."""
    return max(1, int(min(percentile, 100.0) * count / 100 + 0.5))


class RobotFigures:
    """One robot's share of the figures (DEFINITIONS["robots"]): the caller counts its
    cycles and misses by the fleet's rules and records its e2e samples. Not thread-safe."""

    __slots__ = ("cycles", "misses", "e2e")

    def __init__(self) -> None:
        self.cycles = self.misses = 0
        self.e2e = LatencyHistogram(MAX_NS)

    def summary(self) -> dict:
        """{"cycles", "misses", "e2e_ms": percentiles_ms of its e2e}, JSON-ready."""
        return {"cycles": self.cycles, "misses": self.misses, "e2e_ms": percentiles_ms(self.e2e)}


def percentiles_ms(h: LatencyHistogram) -> dict[str, float]:
    """count, clamped and p50/p90/p99/p999/max in ms of a stage histogram (a pass over its
    counts, a few ms: for health and reports, not per message)."""
    out = {k: (v if k == "count" else v / 1e3) for k, v in h.percentiles_us().items()}
    out["clamped"] = h.clamped
    return out
