"""Trace files: one msgpack map per cycle, appended as a plain msgpack stream.

A record is a dict such as the `trace` topic body:
``{"node": str, "cycle": int, "stamps": {name: ns}, "fields": {name: float}}``.
The file is nothing but concatenated msgpack objects (no header, no pickle), so
any msgpack library can read it, and a crash can only cost the unflushed tail:
`read_trace` stops cleanly at a truncated last record.
"""
from __future__ import annotations

import logging
import os
from typing import Iterator

import msgpack
import numpy as np

log = logging.getLogger(__name__)

FLUSH_EVERY = 256          # records between flushes: bounds what a crash can lose
BUFFER_BYTES = 1 << 16     # file buffer; a flush is one write() syscall


def _to_builtin(obj):
    """msgpack `default` hook: numpy scalars and small arrays become plain values."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot trace a {type(obj).__name__}; use int/float/str/dict/list")


class TraceWriter:
    """Write trace records to `path` (created or truncated).

    `write()` packs the record and copies it into a file buffer; the file is
    flushed every `flush_every` records and on `close()`. A record msgpack
    cannot pack is dropped and counted in `dropped` (logged once), so a bad
    field never kills the loop that traces. Not thread-safe: one writer.
    """

    def __init__(self, path: str | os.PathLike, *, flush_every: int = FLUSH_EVERY,
                 buffer_bytes: int = BUFFER_BYTES):
        self.path = os.fspath(path)
        self.flush_every = max(1, int(flush_every))
        self.written = 0
        self.dropped = 0
        self._pending = 0
        self._packer = msgpack.Packer(default=_to_builtin, use_bin_type=True)
        self._f = open(self.path, "wb", buffering=buffer_bytes)

    def write(self, record: dict) -> None:
        """Append one record. Blocks only on the periodic flush (a buffered write)."""
        try:
            data = self._packer.pack(record)
        except (TypeError, ValueError, OverflowError) as exc:
            if not self.dropped:
                log.warning("trace %s: dropping unpackable record (%s)", self.path, exc)
            self.dropped += 1
            return
        self._f.write(data)
        self.written += 1
        self._pending += 1
        if self._pending >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Push buffered records to the OS (not fsync: a process crash is safe)."""
        self._f.flush()
        self._pending = 0

    def close(self) -> None:
        """Flush and close; idempotent."""
        if not self._f.closed:
            self.flush()
            self._f.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_trace(path: str | os.PathLike) -> Iterator[dict]:
    """Yield the records of a trace file in order.

    Opens the file at call time (a missing file raises FileNotFoundError here,
    not on first iteration). A truncated last record (crash mid-write) ends the
    iteration quietly with one warning; bytes that are not msgpack raise
    ValueError naming the offset. Non-dict objects in the stream are skipped.
    """
    f = open(os.fspath(path), "rb")
    return _records(f, os.fspath(path))


def _records(f, path: str) -> Iterator[dict]:
    with f:
        unpacker = msgpack.Unpacker(f, raw=False)
        try:
            for obj in unpacker:
                if isinstance(obj, dict):
                    yield obj
        except (ValueError, TypeError) as exc:
            raise ValueError(f"trace {path}: corrupt record near byte {unpacker.tell()}: "
                             f"{exc}") from None
        tail = os.fstat(f.fileno()).st_size - unpacker.tell()
        if tail > 0:
            log.warning("trace %s: ignored a truncated last record (%d bytes)", path, tail)
