"""Report files written whole or not at all.

A run's reports (launch_summary.json, monitor_report.json, a robot's sim report) are read
by other programs after the run. `write_report` writes the text under a temporary name
beside the file and renames it into place, so a reader finds the old file, the whole new
one, or none: never the 0-byte or cut file a full disk leaves behind a plain write. A write
that fails removes its temporary file and returns why, for the caller's one line; it never
raises, since a report is not worth the rest of the shutdown.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_report(path: str | os.PathLike, text: str) -> str | None:
    """Write `text` to `path` atomically (module docstring); None, or why it was not written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return exc.strerror or str(exc)
    return None
