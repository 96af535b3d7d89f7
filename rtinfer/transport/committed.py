"""The committed prefix of real-time chunking, as the wire carries it (docs/wire.md section 5).

A robot's `obs` may carry `committed`: the waypoints of the plan it is executing that will
run before the chunk answering this observation can land, {"chunk": the cycle of the chunk
they come from, "from": the index of the first in it, "values": float32 (n, D), "start_ns":
when the first is due, on the robot's clock}. They stand for waypoints 0..n-1 of the new
chunk. A robot at rest, tracking no chunk, commits to staying where it is: `chunk` REST,
`from` 0, every row its hold waypoint. A chunk conditioned on them says so in each
waypoint's `conditioned`: {"chunk", "from", "n", "hash"}, `hash` being prefix_hash of the
values, so a robot can tell that the chunk joins what it executed. Robot-safe (numpy and
hashlib only).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

HASH_HEX = 16  # hex digits of sha256 a prefix hash keeps, as the content hash of a spec
REST = 2**64 - 1  # `chunk` of a robot at rest (no chunk in use): it holds where it is


def prefix_hash(values: np.ndarray) -> str:
    """The first 16 hex digits of sha256 over the values as float32, little-endian, C order
    (n * D * 4 bytes): what a committed prefix is named by, computable in any language."""
    v = np.ascontiguousarray(values, dtype="<f4")
    return hashlib.sha256(v.data).hexdigest()[:HASH_HEX]


def committed_body(chunk: int, start: int, values: np.ndarray, start_ns: int) -> dict:
    """The obs body's `committed` map, in wire order (values float32 (n, D))."""
    return {"chunk": int(chunk), "from": int(start), "values": values, "start_ns": int(start_ns)}


@dataclass(slots=True)
class Committed:
    """One observation's committed prefix, as the node takes it; `used` is set by a policy
    that conditioned its chunk on it (then every waypoint names it: `conditioned`)."""

    chunk: int
    start: int
    values: np.ndarray  # float32 (n, D), in the action spec's units
    start_ns: int
    used: bool = False
    _named: dict | None = None

    @classmethod
    def of(cls, body: dict) -> Committed:
        """From an obs body's checked `committed` map."""
        return cls(body["chunk"], body["from"], body["values"], body["start_ns"])

    @property
    def n(self) -> int:
        return len(self.values)

    def conditioned(self) -> dict:
        """The `conditioned` map of every waypoint of a chunk conditioned on this prefix
        (one dict per cycle, hashed once)."""
        if self._named is None:
            self._named = {
                "chunk": self.chunk,
                "from": self.start,
                "n": self.n,
                "hash": prefix_hash(self.values),
            }
        return self._named
