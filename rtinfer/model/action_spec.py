"""ActionSpec: what a policy's actions mean, per dimension, and when each waypoint is due.

    {"format": "rtinfer-action-spec", "version": 1,
     "names": ["x", "y", "z", "suction"], "units": ["m", "m", "m", "1"],
     "low": [-0.7, -0.25, 0.28, 0.0], "high": [0.65, 0.6, 0.7, 1.0],
     "horizon": 4, "period_ns": 50000000, "start_ns": 50000000, "hash": "..."}

A chunk is `horizon` waypoints of D = len(names) values; waypoint i is due at
capture + start_ns + i * period_ns (start_ns = period_ns: waypoint 0 one period after the
observation, rtinfer's own policies; start_ns = 0: waypoint 0 means "now", as ACT's action 0
does). low/high are the limits the values must stay within; the robot clips to its own.
Optional "max_committed": the most committed waypoints (real-time chunking, docs/wire.md) the
policy can condition a chunk on; left out, the policy's kind decides (docs/policies.md). It
is hashed only when present, so a spec without it keeps its hash.
`hash` (16 hex digits of sha256 over the canonical msgpack bytes of every field but the hash)
is what
an `action_chunk` of a continuous-chunk policy carries as `spec` (docs/wire.md), so a robot
never follows a chunk whose names, units, limits or timing differ from its own. An action-
token policy carries its tokenizer's hash instead (rtinfer.model.action_tokens), which
covers the same fields except units, plus the bins.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import msgpack
import numpy as np

FORMAT = "rtinfer-action-spec"


def canonical_bytes(value) -> bytes:
    """The canonical byte form that content hashes are taken over, computable in any
    language with a msgpack library: msgpack, with every map's keys sorted by their UTF-8
    bytes, text as msgpack str, integers in their shortest msgpack form, every real number
    (a limit) as a float64 (0xcb), lists as arrays. docs/policies.md §2 states it."""

    def canon(v):
        if isinstance(v, dict):
            return {k: canon(v[k]) for k in sorted(v, key=lambda k: k.encode())}
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise TypeError(f"canonical form takes str, int, float, lists and maps, not {v!r}")
        return v

    return msgpack.packb(canon(value), use_bin_type=True, use_single_float=False)


def content_hash(doc: dict) -> str:
    """First 16 hex digits of sha256 over `doc`'s canonical_bytes: the hash of an action
    spec and of a tokenizer config."""
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()[:16]


FIELDS = ("names", "units", "low", "high", "horizon", "period_ns", "start_ns")
OPTIONAL = ("max_committed",)  # hashed only when present


@dataclass(frozen=True)
class ActionSpec:
    names: tuple[str, ...]
    units: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    horizon: int
    period_ns: int
    start_ns: int
    max_committed: int | None = None

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        set_("names", tuple(str(n) for n in self.names))
        set_("units", tuple(str(u) for u in self.units))
        set_("low", tuple(float(v) for v in self.low))
        set_("high", tuple(float(v) for v in self.high))
        d = len(self.names)
        if d == 0 or len(set(self.names)) != d:
            raise ValueError(f"names must be one or more distinct names, got {list(self.names)}")
        for key in ("units", "low", "high"):
            if len(getattr(self, key)) != d:
                raise ValueError(
                    f"{key} needs {d} entries (one per name {list(self.names)}), "
                    f"got {len(getattr(self, key))}"
                )
        if not all(
            np.isfinite(lo) and np.isfinite(hi) and lo < hi for lo, hi in zip(self.low, self.high)
        ):
            raise ValueError(
                f"every dimension needs finite low < high, got low {list(self.low)} "
                f"high {list(self.high)}"
            )
        for key, least in (("horizon", 1), ("period_ns", 1), ("start_ns", 0)):
            v = getattr(self, key)
            if type(v) is not int or v < least:
                raise ValueError(f"{key} must be an integer >= {least}, got {v!r}")
        m = self.max_committed
        if m is not None and (type(m) is not int or not 0 <= m < self.horizon):
            raise ValueError(
                f"max_committed must be an integer in [0, horizon - 1 = "
                f"{self.horizon - 1}] (waypoints a chunk is conditioned on; at "
                f"least one is its own), got {m!r}"
            )

    @property
    def dim(self) -> int:
        return len(self.names)

    def to_dict(self) -> dict:
        d = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in ((k, getattr(self, k)) for k in FIELDS)
        }
        if self.max_committed is not None:
            d["max_committed"] = self.max_committed
        return d

    @cached_property
    def hash(self) -> str:
        return content_hash(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> ActionSpec:
        """Build from a dict (an action_spec.json); ValueError names an unknown, missing or
        wrong field, and a "hash" that does not match the content (an edited file)."""
        d = dict(d)
        if d.pop("format", FORMAT) != FORMAT or d.pop("version", 1) != 1:
            raise ValueError(f"not an {FORMAT} version 1 document")
        given = d.pop("hash", None)
        unknown = sorted(set(d) - set(FIELDS) - set(OPTIONAL))
        missing = [k for k in FIELDS if k not in d]
        if unknown or missing:
            raise ValueError(
                f"action spec fields: unknown {unknown}, missing {missing}; "
                f"the fields are {list(FIELDS)}, optionally {list(OPTIONAL)}"
            )
        spec = cls(**d)
        if given is not None and given != spec.hash:
            raise ValueError(
                f"action spec hash {given} does not match its content "
                f'({spec.hash}): the file was edited; remove "hash" or fix it'
            )
        return spec

    @classmethod
    def from_tokenizer(cls, tok, units, start_ns: int | None = None) -> ActionSpec:
        """The action spec of an rtinfer.model.action_tokens.TokenizerConfig: its names,
        limits, horizon and period, with `units`; waypoint 0 one period after capture."""
        return cls(
            tok.names,
            tuple(units),
            tok.low,
            tok.high,
            int(tok.horizon),
            int(tok.period_ns),
            int(tok.period_ns if start_ns is None else start_ns),
        )

    def save(self, path: str | Path) -> None:
        doc = {"format": FORMAT, "version": 1, **self.to_dict(), "hash": self.hash}
        Path(path).write_text(json.dumps(doc, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ActionSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def differences(self, other: ActionSpec) -> list[str]:
        """One line per field where `other` differs from this spec (empty: the same)."""
        a, b = self.to_dict(), other.to_dict()
        return [
            f"{k}: {b.get(k)} where {a.get(k)} is expected"
            for k in (*FIELDS, *OPTIONAL)
            if a.get(k) != b.get(k)
        ]
