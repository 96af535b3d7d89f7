"""What a failover cost each robot, from the robots' own records (controllers.bench_robot's:
per observation, its capture, the waypoints received and accepted for it, the last one's
receive stamp) and the moment the host was killed. No clock is read here.

Per robot, all in ms from the kill (CLOCK_MONOTONIC, one host):
- first_fresh_ms: the first chunk accepted for an observation captured after the kill (so
  computed by a node that was alive then), at its last waypoint's arrival: an upper bound on
  its first waypoint's;
- gap_ms: from the last chunk accepted before the kill to that one;
- hold_ms: how long the robot's watchdog held: the gap less the chunk interval and the
  deadline it waits before holding (controllers.node), at least 0;
- lost: observations captured after the kill and before that first fresh one, answered by
  no accepted chunk;
- stale_applied: chunks accepted whose last waypoint arrived past the deadline of their
  capture (the controller rejects those: must be 0).
"""
from __future__ import annotations

import numpy as np


def robot_figures(rec: dict, kill_ns: int, deadline_ms: float, period_ms: float) -> dict:
    capture, last = rec["capture_ns"], rec["last_recv_ns"]
    accepted = rec["accepted"] > 0
    whole = accepted & (rec["accepted"] == rec["received"])
    stale = int(np.sum(whole & (last - capture > deadline_ms * 1e6)))
    after = accepted & (capture > kill_ns)
    if not after.any():
        return {"first_fresh_ms": None, "gap_ms": None, "hold_ms": None,
                "lost": int(np.sum(capture > kill_ns)), "stale_applied": stale}
    first = int(np.argmin(np.where(after, last, np.iinfo(np.int64).max)))
    before = accepted & (capture <= kill_ns)
    prev_ns = int(last[before].max()) if before.any() else kill_ns
    gap_ms = (int(last[first]) - prev_ns) / 1e6
    waiting = (capture > kill_ns) & (capture < capture[first]) & ~accepted
    return {"first_fresh_ms": round((int(last[first]) - kill_ns) / 1e6, 1),
            "gap_ms": round(gap_ms, 1),
            "hold_ms": round(max(0.0, gap_ms - period_ms - deadline_ms), 1),
            "lost": int(np.sum(waiting)), "stale_applied": stale}


def summary(per_robot: list[dict]) -> dict:
    """Medians and maxima of each figure over robots (and runs); None where none had one."""
    out = {}
    for key in ("first_fresh_ms", "gap_ms", "hold_ms", "lost", "stale_applied"):
        vals = [r[key] for r in per_robot if r[key] is not None]
        out[key] = {"median": float(np.median(vals)) if vals else None,
                    "max": float(max(vals)) if vals else None}
    out["robots_without_fresh_chunk"] = sum(r["first_fresh_ms"] is None for r in per_robot)
    return out
