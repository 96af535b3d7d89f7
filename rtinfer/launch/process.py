"""One supervised node process (its own process group) and the launcher's log console.

`NodeProcess` is driven from the supervisor's thread only; its log reader thread touches
the `Console` (thread-safe: one lock around print + file write) and `last_error` /
`last_line`, which the supervisor reads only after the reader is joined.

Every line a node prints goes to its log. The console gets the same lines except two kinds
of block, which it gets as one line each: a Python traceback (its final ``Error: message``
line and the log's path) and a multi-line JSON document (a report; the sim prints its own).
A log that cannot be written (a full disk) says so once, and the console then gets every
line, blocks too, since the log no longer holds them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from rtinfer.launch.spec import NodeSpec

TRACEBACK = "Traceback (most recent call last):"
CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def _print(text: str) -> None:
    try:
        print(text, flush=True)
    except (OSError, ValueError):
        pass  # our stdout went away (closed pipe, full disk); the log files still get it


class LogFile:
    """A line-buffered log file that a full disk cannot break: the first write that fails
    stops the file, said once on the console; the lines still reach the console, and those
    the file missed are counted (`lost`). Used under the Console's lock."""

    def __init__(self, path: Path):
        self.path, self.lost, self.failed = path, 0, None
        self._f = open(path, "a", buffering=1)

    def write(self, text: str) -> None:
        if self.failed is None:
            try:
                self._f.write(text)
                return
            except OSError as exc:
                self.failed = exc.strerror or str(exc)
                self.close()
                _print(
                    f"[launch] {self.path}: {self.failed}: writing it stopped; its lines "
                    f"still come here"
                )
        self.lost += 1

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass  # the buffered tail could not be written either


class Console:
    """Prefixed lines to stdout and to log files. Thread-safe."""

    def __init__(self, launch_log: Path):
        self._lock = threading.Lock()
        self._log = LogFile(launch_log)

    def line(self, name: str, text: str, log: LogFile | None = None) -> None:
        with self._lock:
            if log is not None:
                log.write(text + "\n")
            _print(f"[{name}] {text}")

    def say(self, text: str) -> None:
        self.line("launch", text, self._log)

    def close(self) -> None:
        with self._lock:
            self._log.close()


class NodeProcess:
    """A node's current OS process plus its restart history.

    state: pending -> running -> exited (poll saw it) -> backoff | done | failed; stopped.
    """

    def __init__(self, spec: NodeSpec, argv: list[str], run_dir: Path, console: Console):
        self.spec, self.name, self.argv = spec, spec.name, argv
        self.log_path = run_dir / f"{spec.name}.log"
        self.console = console
        self.state = "pending"
        self.popen: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None
        self.first_start = float("inf")
        self.restart_at = 0.0
        self.restarts = 0
        self.restart_times: deque[float] = deque()
        self.last_exit: int | None = None
        self.started_at = 0.0  # monotonic start of the current process
        self.last_error: str | None = None  # last traceback's final line (this process)
        self.last_line: str | None = None  # last non-empty output line (this process)
        self.spoke = threading.Event()  # its first output line came (this process)
        self.failures = 0  # failed exits, over the whole run
        self.failure: str | None = None  # the last one: "exit code 1: ValueError: ..."
        self.up_at_stop = 0.0  # up_for() when the launch stopped it

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "rtinfer.launch.child",
            "--name",
            self.name,
            "--parent",
            str(os.getpid()),
        ]
        if self.spec.cpus:
            cmd += ["--cpus", ",".join(map(str, self.spec.cpus))]
        if self.spec.priority is not None:
            cmd += ["--priority", str(self.spec.priority)]
        return cmd + ["--", self.spec.entry, *self.argv]

    def start(self) -> None:
        now = time.monotonic()
        if self.popen is not None:
            self.restarts += 1
            self.restart_times.append(now)
        self.first_start = min(self.first_start, now)
        self.started_at, self.last_error, self.last_line = now, None, None
        self.spoke.clear()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # start_new_session: the node leads its own process group (killpg reaches its
        # children) and a terminal's Ctrl-C reaches only the launcher, which forwards it.
        self.popen = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        self.state = "running"
        self.console.say(
            f"started {self.name!r} pid {self.popen.pid}: {self.spec.entry} " + " ".join(self.argv)
        )
        self.reader = threading.Thread(
            target=self._pump, args=(self.popen.stdout,), name=f"log-{self.name}", daemon=True
        )
        self.reader.start()

    def _pump(self, stream) -> None:
        block: str | None = None  # "traceback" | "json" while inside one
        lines = 0
        log = LogFile(self.log_path)
        with stream:
            for raw in stream:
                text = raw.decode(errors="replace").rstrip("\n")
                if text.strip():
                    self.last_line = text.strip()
                    self.spoke.set()
                # collapsed only while the log keeps them (a full disk: the console gets all)
                if (
                    block is None
                    and log.failed is None
                    and (text == TRACEBACK or text in ("{", "["))
                ):
                    block, lines = ("traceback" if text == TRACEBACK else "json"), 0
                if block is None:
                    self.console.line(self.name, text, log)
                    continue
                log.write(text + "\n")
                lines += 1
                if block == "json" and text in ("}", "]"):
                    self.console.line(
                        self.name, f"(printed {lines} lines of JSON: see {self.log_path})"
                    )
                    block = None
                elif (
                    block == "traceback"
                    and text
                    and not text[0].isspace()
                    and text != TRACEBACK
                    and text not in CHAINED
                ):
                    self.last_error = text.strip()  # "ValueError: what went wrong"
                    self.console.line(
                        self.name, f"{self.last_error} (traceback in {self.log_path})"
                    )
                    block = None
            if block is not None:  # the stream ended inside a block (the node died)
                self.console.line(self.name, f"(output cut short: see {self.log_path})")
        log.close()

    def reason(self) -> str:
        """What the node's last process said before it ended: its exception, else its last line."""
        return self.last_error or self.last_line or "no output"

    def up_for(self, now: float) -> float:
        """Seconds the current process has been running (0 when none is)."""
        return now - self.started_at if self.state == "running" else 0.0

    def poll(self) -> int | None:
        """The exit status if the running process has just exited (once), else None."""
        if self.state != "running" or self.popen.poll() is None:
            return None
        self._reap_group()
        self.state, self.last_exit = "exited", self.popen.returncode
        return self.popen.returncode

    @staticmethod
    def describe_exit(rc: int) -> str:
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit code {rc}"

    def recent_restarts(self, now: float) -> int:
        while self.restart_times and now - self.restart_times[0] > self.spec.restart.window_s:
            self.restart_times.popleft()
        return len(self.restart_times)

    def schedule_restart(self, at: float) -> None:
        self.state, self.restart_at = "backoff", at

    def stop(self, hurry: Callable[[], bool]) -> None:
        """SIGTERM the group, wait up to stop_grace_s (less if hurry()), SIGKILL the group."""
        self.up_at_stop = self.up_for(time.monotonic())
        if self.state == "running":
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + self.spec.stop_grace_s
            while time.monotonic() < deadline and not hurry() and not self._group_gone():
                time.sleep(0.02)
            if not self._group_gone():
                why = (
                    "a second signal"
                    if hurry()
                    else f"still running after {self.spec.stop_grace_s:g} s grace"
                )
                self.console.say(f"{self.name!r}: {why}: SIGKILL to its process group")
            self._reap_group()
            self.last_exit = self.popen.returncode
            self.console.say(f"stopped {self.name!r} ({self.describe_exit(self.popen.returncode)})")
        elif self.popen is not None:
            self._reap_group()
        if self.state in ("running", "backoff", "pending"):
            self.state = "stopped"

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_gone(self) -> bool:
        if self.popen.poll() is None:
            return False
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _reap_group(self) -> None:
        """SIGKILL whatever is left of the group, reap the leader, drain its log."""
        self._signal(signal.SIGKILL)
        self.popen.wait()
        if self.reader is not None:
            self.reader.join(timeout=2.0)
