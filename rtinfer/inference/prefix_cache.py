"""PrefixCache: the instruction prefix's KV, kept across cycles, one snapshot per instruction.

A robot's instruction changes rarely (one task for many cycles), so the prefix's KV is
computed once and kept: a snapshot per key (the instruction's tokens and the gated graph
set that computed them), the MAX_CACHED_INSTRUCTIONS first seen most recently (the oldest
goes first). What a snapshot is belongs to its runner (a backend's KV, or one row of a
batched session's); the single-row runner (rtinfer.inference.runner) and the batched one
(rtinfer.inference.batch) both keep theirs here. Counts into the owner's counters:
prefix_prefills (a prefix computed and kept) and prefix_restores (one restored from its
snapshot). Not thread-safe.
"""

from __future__ import annotations

import numpy as np

MAX_CACHED_INSTRUCTIONS = 8


class PrefixCache:
    def __init__(self, counters: dict, size: int = MAX_CACHED_INSTRUCTIONS):
        self.counters, self.size = counters, size
        counters.setdefault("prefix_prefills", 0)
        counters.setdefault("prefix_restores", 0)
        self._snaps: dict[tuple, object] = {}

    @staticmethod
    def key(instr: np.ndarray, gate: str | None = None) -> tuple:
        """What identifies a prefix's KV: the gated set that computed it and the tokens."""
        return (gate, *instr.tolist())

    def get(self, key: tuple):
        """The snapshot kept for key (counted as a restore), else None."""
        snap = self._snaps.get(key)
        if snap is not None:
            self.counters["prefix_restores"] += 1
        return snap

    def put(self, key: tuple, snap) -> None:
        """Keep a freshly computed prefix's snapshot (counted as a prefill)."""
        if key not in self._snaps and len(self._snaps) >= self.size:
            self._snaps.pop(next(iter(self._snaps)))
        self._snaps[key] = snap
        self.counters["prefix_prefills"] += 1

    def __contains__(self, key: tuple) -> bool:
        return key in self._snaps
