"""One row of the peer comparison: percentiles of both sides, ratios, target, run counts.

speedup = peer / rtinfer (above 1: rtinfer is faster/lower). Samples are raw values (ns for
latencies); they are reported in the row's unit (us unless said otherwise).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import numpy as np


def package_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def pct(samples, q: float, scale: float = 1e-3) -> float | None:
    a = np.asarray(samples, np.float64)
    return None if a.size == 0 else round(float(np.percentile(a, q)) * scale, 2)


def _ratio(peer, ours) -> float | None:
    return None if not peer or not ours else round(peer / ours, 2)


def make_row(
    name: str,
    peer: str,
    peer_version: str | None,
    ours,
    theirs,
    *,
    unit: str = "us",
    target_speedup_p50: float | None = None,
    scale: float = 1e-3,
    **extra,
) -> dict:
    """A comparison row from two sample sets (alternated in the same run by the caller)."""
    r50, p50 = pct(ours, 50, scale), pct(theirs, 50, scale)
    r99, p99 = pct(ours, 99, scale), pct(theirs, 99, scale)
    row = {
        "name": name,
        "peer": peer,
        "peer_version": peer_version,
        "peer_available": True,
        "unit": unit,
        "rtinfer_p50": r50,
        "peer_p50": p50,
        "rtinfer_p99": r99,
        "peer_p99": p99,
        "speedup_p50": _ratio(p50, r50),
        "speedup_p99": _ratio(p99, r99),
        "target_speedup_p50": target_speedup_p50,
        "runs": {"rtinfer": int(np.size(ours)), "peer": int(np.size(theirs))},
    }
    if target_speedup_p50 is not None and row["speedup_p50"] is not None:
        row["target_met"] = row["speedup_p50"] >= target_speedup_p50
    row.update(extra)
    return row


def unavailable_row(name: str, peer: str, why: str, **extra) -> dict:
    """A row for a peer that could not run: no figures, never invented ones."""
    return {
        "name": name,
        "peer": peer,
        "peer_version": None,
        "peer_available": False,
        "unit": None,
        "rtinfer_p50": None,
        "peer_p50": None,
        "rtinfer_p99": None,
        "peer_p99": None,
        "speedup_p50": None,
        "speedup_p99": None,
        "target_speedup_p50": None,
        "runs": {},
        "skipped": why,
        **extra,
    }
