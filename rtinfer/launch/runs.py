"""Run directories and the endpoints a live run holds: what keeps two launches apart.

- `make_run_dir`: the default run directory, ``runs/<name>-<YYYYmmdd-HHMMSS>``, gets a
  ``-2``, ``-3`` ... suffix when that name exists (mkdir is the atomic test), so a run
  directory is never shared, even by two launches in the same second. Old ones are kept.
- `ipc_path`: where an ``ipc`` endpoint's socket file lives: ``<run_dir>/<name>`` when that
  fits a unix socket's sun_path (107 bytes), else ``/tmp/rtinfer-<uid>/s/<hash>/<name>``,
  the hash being of the run directory (so anyone who knows the run dir finds the socket).
- `Claim`: each launcher records itself (pid, run dir, file, the endpoints its nodes use)
  in ``/tmp/rtinfer-<uid>/runs/``. Before a node starts, `Claim.check` refuses a run dir or
  an endpoint held by another *live* launcher (naming that run), probes every ipc socket
  file (a connect: a live binder answers, a file left by a SIGKILLed run refuses and is
  removed and reused), and drops the records of launchers that are gone. A live binder
  that no recorded run holds (a process outside the launch, e.g. a robot a test drives)
  is noted in the log, not refused: the launcher cannot tell whether its nodes bind the
  endpoint or connect to it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import tempfile
import time
from pathlib import Path

from rtinfer.launch.yaml_lines import LaunchError

RUNTIME_DIR = Path(f"/tmp/rtinfer-{os.getuid()}")  # short on purpose: socket paths live here
SUN_PATH_MAX = 107  # bytes of a unix socket path (sizeof(sun_path) - 1 for the NUL)


def ipc_path(run_dir: str | Path, name: str) -> str:
    """The socket file of endpoint `name` (url "ipc") in a run: see the module docstring."""
    run_dir = str(Path(run_dir).resolve())
    path = f"{run_dir}/{name}"
    if len(path.encode()) <= SUN_PATH_MAX:
        return path
    digest = hashlib.sha1(run_dir.encode()).hexdigest()[:12]
    return f"{RUNTIME_DIR}/s/{digest}/{name}"


def unwritable(folder: Path) -> str | None:
    """Why no file can be created in `folder` (a read-only mount, a full disk, another
    user's folder), or None: a file is created and removed, so root's permission bypass
    and a read-only mount are told apart from what the mode bits say."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".rtinfer-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def make_run_dir(explicit: str | None, name: str, stamp: str) -> Path:
    """`explicit` as given (created if missing), else a new unique runs/<name>-<stamp>[-N]
    (`stamp`: the caller's date text, YYYYmmdd-HHMMSS). LaunchError when it cannot be
    created or written."""
    try:
        if explicit:
            rd = Path(explicit).resolve()
            rd.mkdir(parents=True, exist_ok=True)
            why = unwritable(rd)
            if why:
                raise LaunchError(
                    f"run directory {rd} is not writable ({why}); pass a writable --run-dir"
                )
            return rd
        base = Path("runs").resolve() / f"{name}-{stamp}"
        base.parent.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            rd = base if n == 1 else base.with_name(f"{base.name}-{n}")
            try:
                rd.mkdir()
                return rd
            except FileExistsError:
                continue
        raise LaunchError(f"cannot find a free run directory name next to {base}")
    except OSError as exc:
        raise LaunchError(
            f"cannot create run directory {exc.filename}: {exc.strerror}; pass a writable --run-dir"
        ) from None


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None if it does not exist: a pid
    with another start time is a reused pid, not the launcher that wrote the record."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _probe(path: str) -> str:
    """'live' (a process accepts on the socket), 'stale' (a socket file nobody binds),
    'missing', or 'other' (not a socket)."""
    try:
        if not Path(path).is_socket():
            return "missing" if not os.path.lexists(path) else "other"
    except OSError:
        return "missing"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return "live"
    except OSError as exc:
        return "stale" if exc.errno in (errno.ECONNREFUSED, errno.ENOENT) else "live"
    finally:
        s.close()


class Claim:
    """This launcher's record in RUNTIME_DIR/runs; `check` before any node starts,
    `release` at the end. Driven from the supervisor's thread."""

    def __init__(
        self, run_dir: Path, file: str, name: str, host: str | None, endpoints: dict[str, str]
    ):
        self.record = {
            "pid": os.getpid(),
            "start": _start_ticks(os.getpid()),
            "written_ns": time.monotonic_ns(),
            "run_dir": str(run_dir),
            "file": str(file),
            "name": name,
            "host": host,
            "endpoints": endpoints,
        }
        self.dir = RUNTIME_DIR / "runs"
        self.path = self.dir / f"{os.getpid()}.json"
        self.notes: list[str] = []  # what check() cleaned up, for the launch log

    def check(self) -> None:
        """Write our record, then refuse (LaunchError, our record removed) a run dir or an
        endpoint that a live launcher which recorded itself before us holds."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.path.write_text(json.dumps(self.record))
        except OSError as exc:
            raise LaunchError(f"cannot write the run record {self.path}: {exc.strerror}") from None
        try:
            for other in self._live_others():
                self._refuse_overlap(other)
            self._probe_ipc()
        except LaunchError:
            self.release()
            raise

    def _live_others(self) -> list[dict]:
        out = []
        for f in sorted(self.dir.glob("*.json")):
            if f == self.path:
                continue
            try:
                rec = json.loads(f.read_text())
                start = _start_ticks(int(rec["pid"]))
                live = start is not None and start == rec.get("start")
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written right now, or not ours: ignore
            if not live:
                f.unlink(missing_ok=True)
                self.notes.append(
                    f"removed the record of a run that no longer runs "
                    f"({rec.get('run_dir')}, launcher pid {rec.get('pid')})"
                )
            elif (rec.get("written_ns", 0), rec["pid"]) < (self.record["written_ns"], os.getpid()):
                out.append(rec)  # recorded before us (CLOCK_MONOTONIC): the later one gives way
        return out

    def _refuse_overlap(self, other: dict) -> None:
        me = self.record
        who = f"the live run of {other['file']} in {other['run_dir']} (launcher pid {other['pid']})"
        if other["run_dir"] == me["run_dir"]:
            raise LaunchError(
                f"run directory {me['run_dir']} is in use by {who}; pass "
                "another --run-dir, or stop that run first"
            )
        # one deployment's launchers on one machine (--host robot, --host gpu) share its endpoints
        peer = (
            other["name"] == me["name"]
            and None not in (other["host"], me["host"])
            and other["host"] != me["host"]
        )
        shared = sorted(set(me["endpoints"].values()) & set(other["endpoints"].values()))
        if shared and not peer:
            names = [n for n, a in me["endpoints"].items() if a in shared]
            raise LaunchError(
                f"endpoint {names[0]!r} ({shared[0]}) is in use by {who}; "
                "give this run its own endpoints (ipc ones live in the run "
                "directory: pass another --run-dir) or stop that run first"
            )

    def _probe_ipc(self) -> None:
        for name, address in self.record["endpoints"].items():
            if not address.startswith("ipc://"):
                continue
            path = address[len("ipc://") :]
            state = _probe(path)
            if state == "live":  # e.g. a robot process outside the launch that binds it
                self.notes.append(
                    f"endpoint {name!r}: {path} is bound by a live process "
                    "outside any recorded run: nodes that connect reach it, "
                    "a node that binds it takes it over"
                )
            if state == "other":
                raise LaunchError(
                    f"endpoint {name!r}: {path} exists and is not a socket; "
                    "remove it or choose another address"
                )
            if state == "stale":
                os.unlink(path)
                self.notes.append(
                    f"reusing {path}: a stale ipc socket file that no live "
                    "process binds (left by a run that was killed)"
                )
            Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    def release(self) -> None:
        """Remove our record, and the short socket directory of this run if it is empty."""
        self.path.unlink(missing_ok=True)
        for address in self.record["endpoints"].values():
            parent = Path(address[len("ipc://") :]).parent
            if address.startswith("ipc://") and RUNTIME_DIR / "s" in parent.parents:
                for left in parent.glob("*"):  # a node killed before it could unlink
                    if _probe(str(left)) == "stale":
                        left.unlink(missing_ok=True)
                try:
                    parent.rmdir()
                except OSError:
                    pass
