"""Trace files: one msgpack map per cycle, appended as a plain msgpack stream.

A record is a dict such as the `trace` topic body:
``{"node": str, "cycle": int, "stamps": {name: ns}, "fields": {name: float}}``.
The file is nothing but concatenated msgpack objects (no header, no pickle), so
any msgpack library can read it, and a crash can only cost the unflushed tail:
`read_trace` stops cleanly at a truncated last record.

A trace is not worth a robot: when the file cannot be written (a full disk, a removed
mount), the writer stops writing, says so in one line on stderr, and counts every record
it did not write in `lost`; the loop that traces goes on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import msgpack
import numpy as np

from rtinfer.realtime.complaints import Complaints

FLUSH_EVERY = 256  # records between flushes: bounds what a crash can lose
BUFFER_BYTES = 1 << 16  # a fuller buffer is flushed early; a flush is one write() syscall


def _to_builtin(obj):
    """msgpack `default` hook: numpy scalars and small arrays become plain values."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot trace a {type(obj).__name__}; use int/float/str/dict/list")


class TraceWriter:
    """Write trace records to `path` (created or truncated).

    `write()` packs the record and copies it into a buffer of whole records; the
    buffer is written every `flush_every` records (or once it holds
    `buffer_bytes`) and on `close()`. A record msgpack
    cannot pack is dropped and counted in `dropped` (logged once), so a bad
    field never kills the loop that traces. A write that fails (OSError: the
    disk is full) stops the trace for good (module docstring): `failed` says
    why, `lost` counts the records not written (those still in the buffer then
    too: the file is cut back to the last flush), `written` those that were.
    Not thread-safe: one writer.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        flush_every: int = FLUSH_EVERY,
        buffer_bytes: int = BUFFER_BYTES,
    ):
        self.path = os.fspath(path)
        self.flush_every = max(1, int(flush_every))
        self.buffer_bytes = int(buffer_bytes)
        self.written = 0
        self.dropped = 0
        self.lost = 0
        self.failed: str | None = None
        self._say = Complaints(f"trace {self.path}").say
        self._told_lost = False
        self._pending = 0  # records in _buf
        self._buf = bytearray()  # whole records only: a flush writes all of them or fails
        self._in_file = 0  # bytes in the file after the last flush
        self._packer = msgpack.Packer(default=_to_builtin, use_bin_type=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, record: dict) -> None:
        """Append one record. Blocks only on the periodic flush (one write() syscall)."""
        if self.failed is not None:
            self.lost += 1
            return
        try:
            data = self._packer.pack(record)
        except (TypeError, ValueError, OverflowError) as exc:
            if not self.dropped:
                self._say(
                    "unpackable",
                    f"dropping unpackable records ({exc}); trace "
                    "int/float/str/dict/list and numpy values",
                )
            self.dropped += 1
            return
        self._buf += data
        self.written += 1
        self._pending += 1
        if self._pending >= self.flush_every or len(self._buf) >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        """Push buffered records to the OS (not fsync: a process crash is safe)."""
        if self.failed is not None or self._fd is None or not self._buf:
            return
        view, done = memoryview(self._buf), 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError as exc:
            view.release()
            self._fail(exc)
            return
        view.release()
        self._in_file += done
        self._buf.clear()
        self._pending = 0

    def _fail(self, exc: OSError) -> None:
        """Stop for good: the file is cut back to the last flush (it then holds exactly the
        `written` records, and the space a partial write took is free again for the
        reports), the records after it count as lost, and the file is let go."""
        self.failed = exc.strerror or str(exc)
        self.written -= self._pending
        self.lost += self._pending
        self._pending = 0
        self._buf = bytearray()
        self._say(
            "failed",
            f"{self.failed}: trace writing stopped; the loop goes on, "
            f"records not written are counted",
        )
        try:
            if self._fd is not None:
                os.ftruncate(self._fd, self._in_file)
        except OSError:
            pass
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def close(self) -> None:
        """Flush and close; idempotent. A trace that stopped says how much it lost."""
        self.flush()
        self._close_fd()
        if self.failed is not None and self.lost and not self._told_lost:
            self._told_lost = True
            self._say(
                "lost", f"{self.lost} records not written ({self.failed}); {self.written} written"
            )

    def __enter__(self) -> TraceWriter:
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
            raise ValueError(
                f"trace {path}: corrupt record near byte {unpacker.tell()}: {exc}"
            ) from None
        tail = os.fstat(f.fileno()).st_size - unpacker.tell()
        if tail > 0:
            Complaints(f"trace {path}").say(
                "truncated", f"ignored a truncated last record ({tail} bytes)", error=False
            )
