"""The launcher: run a validated launch file's nodes as supervised OS processes.

    python -m rtinfer.launch.supervisor FILE [--host NAME] [--seconds S] [--run-dir DIR]
                                             [--set K=V]... [--check]

Validation (rtinfer.launch.file) finishes before anything starts. Each node then runs as
``python -m rtinfer.launch.child ... -- module:function ARGS`` in its own session, so it is
a process group that is signalled and killed together with any children it spawns. The
child applies CPU affinity and SCHED_FIFO priority before calling the entry point.

Logs: each node's stdout and stderr (merged, line by line, by one reader thread per
process) are printed as ``[node] line`` and appended to ``<run_dir>/<node>.log``; the
launcher's own lines go to ``[launch]`` and ``<run_dir>/launch.log``. At the end
``<run_dir>/launch_summary.json`` has each node's state, restarts and last exit.

Lifecycle: nodes start in order. A node that exits is restarted per its policy (failure =
non-zero exit or a signal). A required node that exits 0 ends the launch (exit 0); one
that fails for good ends it with exit 1. A per-robot node (`robots: N`) is required for its
own robot only: when it exits 0 or fails for good, that robot ends (its other per-robot nodes
are stopped, one line says so, launch_summary.json's "robots_ended" records it) and the
other robots go on; the launch ends when every robot has (exit 1 if every robot failed).
When no node is left running or waiting to restart, the launch ends (exit 1 if any failed).
SIGINT/SIGTERM (once) or the --seconds bound stop the nodes in reverse start order: SIGTERM
to the group, `stop_grace_s`, then SIGKILL to the group; a second signal skips the grace.
Leftover members of a node's group are SIGKILLed when the node exits.

Exit status: 0 clean stop; 1 a required node failed for good (or every node exited, some
failed); 2 invalid launch file or setup (nothing started); 3 the run ended normally but a
node failed for good (restarts exhausted) or never became healthy (it failed and was not
back up for RECOVERED_S when the run ended). Each failed node gets one line,
``node 'N' FAILED: why (last exit: the exception's line); log PATH``; the traceback is only
in the node's log.

`seconds:` (the file's, or --set seconds=S) is passed to the nodes that take ${seconds}, which
end the run themselves; when no node takes it, it is the launcher's own bound, as --seconds
(said in the launch log). --seconds always bounds the launch.

Runs: the default run directory is new for every run (rtinfer.launch.runs.make_run_dir);
a run directory or endpoint held by another live launcher is refused before any node
starts, and a stale ipc socket file left by a killed run is reused (rtinfer.launch.runs).

Limits: a grandchild that calls setsid() leaves its node's group and is not tracked; if
the launcher is SIGKILLed, nodes get SIGTERM from the kernel (PR_SET_PDEATHSIG) but their
own children are not reached.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from rtinfer.launch.file import load
from rtinfer.launch.process import Console, NodeProcess
from rtinfer.launch.record import check_record, make_folder, recorder_node
from rtinfer.launch.runs import Claim, make_run_dir
from rtinfer.launch.spec import LaunchSpec
from rtinfer.launch.yaml_lines import LaunchError
from rtinfer.realtime.complaints import say
from rtinfer.realtime.report_file import write_report
from rtinfer.realtime.spin import on_signals

POLL_S = 0.05  # supervision tick: exit detection and restart latency, not a control loop
RECOVERED_S = 2.0  # a node that failed counts as healthy again once up this long
DEGRADED = 3  # exit status: the run ended normally, but a node failed or never got healthy
# Files in the run directory that are the launcher's own, not a node's report.
# A second SIGINT/SIGTERM this long after the first means "kill now". Closer ones are one
# event: PR_SET_PDEATHSIG fires once per exiting thread of the dying parent (the kernel
# reparents to its next thread first), so a SIGKILLed demo delivers several at once.
HURRY_AFTER_S = 0.5
OWN_FILES = {"monitor.json", "curve.json", "launch_summary.json"}


class Supervisor:
    """Runs `nodes` of `spec` until stopped; `run()` blocks and returns the exit status.

    Call from the main thread (signal handlers; PR_SET_PDEATHSIG follows the forking thread).
    """

    def __init__(
        self,
        spec: LaunchSpec,
        nodes,
        run_dir: Path,
        *,
        host: str | None = None,
        seconds: float | None = None,
        console: Console | None = None,
    ):
        self.spec, self.run_dir, self.seconds = spec, run_dir, seconds
        self.console = console or Console(run_dir / "launch.log")
        values = spec.values(run_dir, host)
        if not spec.realtime:  # realtime: false (--set realtime=false): plain scheduling
            nodes = [replace(n, cpus=None, priority=None) for n in nodes]
            self.console.say("realtime: false: no node's cpus or priority is applied")
        self.procs = [NodeProcess(n, spec.argv(n, values), run_dir, self.console) for n in nodes]
        self.stop_reason: str | None = None
        self.exit_code = 0
        self.robots = sorted({n.robot for n in nodes if n.robot is not None})
        self.robots_ended: dict[int, str] = {}  # robot -> why it ended (its required node)
        self._robots_failed = 0
        self.hurry = False
        self._first_signal_at = 0.0

    def _on_signal(self, signum: int) -> None:
        now = time.monotonic()
        if self.stop_reason is not None and now - self._first_signal_at >= HURRY_AFTER_S:
            self.hurry = True  # a second signal: kill now
        if self.stop_reason is None:
            self.stop_reason, self._first_signal_at = f"received {signal.Signals(signum).name}", now

    def _stop(self, reason: str, code: int = 0) -> None:
        if self.stop_reason is None:
            self.stop_reason, self.exit_code = reason, code

    def run(self) -> int:
        with on_signals(self._on_signal):
            try:
                self._supervise()
            except OSError as exc:  # e.g. fork refused: stop what runs, report, exit 2
                self._stop(f"cannot start a node: {exc}", code=2)
            finally:
                self._stop_all()
                self._summary()  # still under our handlers: a late SIGTERM must not cut it short
        return self.exit_code

    def _supervise(self) -> None:
        for p in self.procs:
            if self.stop_reason is None:
                p.start()
                self._await_first_line(p)
        end = None if self.seconds is None else time.monotonic() + self.seconds
        while self.stop_reason is None:
            time.sleep(POLL_S)
            now = time.monotonic()
            for p in self.procs:
                self._check(p, now)
            if all(p.state in ("done", "failed") for p in self.procs):
                failed = any(p.state == "failed" for p in self.procs)
                self._stop("every node has exited", code=1 if failed else 0)
            if end is not None and now >= end:
                self._stop(f"seconds {self.seconds:g} elapsed")

    def _await_first_line(self, p: NodeProcess) -> None:
        """A node with ready_s (the shipped monitor, the recorder) holds the next ones back
        until it has said its first line (it is listening) or ready_s passed, or it exited,
        or a stop came."""
        end = time.monotonic() + p.spec.ready_s
        while (
            self.stop_reason is None
            and time.monotonic() < end
            and p.popen.poll() is None
            and not p.spoke.wait(POLL_S)
        ):
            pass

    def _check(self, p: NodeProcess, now: float) -> None:
        if p.state == "backoff" and now >= p.restart_at:
            p.start()
            return
        rc = p.poll()
        if rc is None:
            return
        reason = p.describe_exit(rc)
        if rc != 0:
            p.failures += 1
            p.failure = f"{reason}: {p.reason()}"
        if rc == 0:
            p.state = "done"
            self.console.say(f"node {p.name!r} finished ({reason})")
            if p.spec.required and p.spec.robot is not None:
                self._end_robot(p, f"required node {p.name!r} finished", failed=False)
            elif p.spec.required:
                self._stop(f"required node {p.name!r} finished")
            return
        policy = p.spec.restart
        recent = p.recent_restarts(now)
        if policy.policy == "on-failure" and recent < policy.max_restarts:
            delay = policy.delay_s(recent)
            p.schedule_restart(now + delay)
            self.console.say(
                f"node {p.name!r} failed ({reason}); restart {recent + 1}/"
                f"{policy.max_restarts} in {delay:g} s"
            )
            return
        p.state = "failed"
        why = f"node {p.name!r} failed for good ({reason}, {p.restarts} restarts)"
        self.console.say(why)
        if p.spec.required and p.spec.robot is not None:
            self._end_robot(p, f"required {why}", failed=True)
        elif p.spec.required:
            self._stop(f"required {why}", code=1)

    def _end_robot(self, p: NodeProcess, why: str, failed: bool) -> None:
        """Robot p.spec.robot ends (its required node `p` finished or failed for good): its
        other nodes are stopped, the rest of the launch goes on until every robot ended."""
        k = p.spec.robot
        if k in self.robots_ended:
            return
        self.robots_ended[k] = why
        self._robots_failed += failed
        for q in self.procs:
            if q.spec.robot == k and q is not p and q.state in ("running", "backoff", "pending"):
                q.stop(lambda: self.hurry)
        left = len(self.robots) - len(self.robots_ended)
        if failed or left:
            self.console.say(f"robot {k} ended: {why}; {left} of {len(self.robots)} robots go on")
        if not left:
            every = self._robots_failed == len(self.robots)
            self._stop(f"every robot has ended (the last: {why})", code=1 if every else 0)

    def _stop_all(self) -> None:
        self.console.say(f"stopping: {self.stop_reason or 'launcher error'}")
        for p in reversed(sorted(self.procs, key=lambda q: q.first_start)):
            p.stop(lambda: self.hurry)

    def _verdict(self, p: NodeProcess) -> str | None:
        """Why `p` failed this run (None: it did not), for its FAILED line."""
        if p.state == "failed":
            if p.spec.restart.policy == "on-failure":
                return f"exhausted its restarts ({p.restarts} of {p.spec.restart.max_restarts})"
            return "failed (restart: never)"
        if p.failures and p.state != "done" and p.up_at_stop < RECOVERED_S:
            return (
                f"never became healthy ({p.failures} failures, {p.restarts} restarts; "
                f"not back up for {RECOVERED_S:g} s when the run ended)"
            )
        return None

    def _summary(self) -> None:
        failed = {
            p.name: f"{why} (last exit: {p.failure})"
            for p in self.procs
            if (why := self._verdict(p))
        }
        if failed and self.exit_code == 0:
            self.exit_code = DEGRADED
        nodes = {
            p.name: {"state": p.state, "restarts": p.restarts, "last_exit": p.last_exit}
            for p in self.procs
        }
        summary = {
            "exit_code": self.exit_code,
            "reason": self.stop_reason,
            "nodes": nodes,
            "failed": failed,
            "run_dir": str(self.run_dir),
        }
        if self.robots:
            summary["robots_ended"] = {str(k): v for k, v in self.robots_ended.items()}
        why = write_report(self.run_dir / "launch_summary.json", json.dumps(summary, indent=1))
        if why:
            self.console.say(f"launch_summary.json not written: {why}")
        self.console.say(
            f"exit {self.exit_code}: "
            + ", ".join(f"{n} {v['state']} ({v['restarts']} restarts)" for n, v in nodes.items())
        )
        for p in self.procs:
            if p.name in failed:
                self.console.say(f"node {p.name!r} FAILED: {failed[p.name]}; log {p.log_path}")
        reports = sorted(
            f.name
            for f in self.run_dir.iterdir()
            if f.is_file() and f.suffix in (".json", ".trace") and f.name not in OWN_FILES
        )
        self.console.say(
            f"run directory {self.run_dir}: "
            + (f"reports {', '.join(reports)}; " if reports else "")
            + "each node's full output in NODE.log"
        )
        self.console.close()


def run_file(
    path: str | Path,
    *,
    host: str | None = None,
    seconds: float | None = None,
    run_dir: str | Path | None = None,
    overrides: dict[str, str] | None = None,
    check: bool = False,
    record: str | None = None,
) -> int:
    """Validate `path` and (unless `check`) run it; blocks; returns the exit status.
    record: an .mcap file the run is recorded to (rtinfer.launch.record).

    Raises LaunchError for an invalid file, unknown host or unusable run directory.
    """
    spec = load(path, overrides)
    out = None if record is None else check_record(record)
    hosts = sorted({n.host for n in spec.nodes if n.host})
    if check and host is None and len(hosts) > 1:  # a multi-host file: every host's share
        shares = "; ".join(f"{h}: {', '.join(n.name for n in spec.nodes_for(h))}" for h in hosts)
        print(f"{path}: ok ({shares})")
        return 0
    nodes = spec.nodes_for(host)
    if check:
        print(f"{path}: ok ({', '.join(n.name for n in nodes)})")
        return 0
    explicit = run_dir or spec.run_dir
    existed = explicit is not None and Path(explicit).exists()
    rd = make_run_dir(explicit, spec.name, datetime.now().strftime("%Y%m%d-%H%M%S"))
    claim = Claim(
        rd,
        path,
        spec.name,
        host,
        {e: spec.endpoints[e].address(rd) for e in spec.endpoints_used(nodes)},
    )
    try:
        claim.check()
    except LaunchError:
        if not existed and not any(rd.iterdir()):
            rd.rmdir()  # a run dir made for a run that never started is no record
        raise
    try:
        for name, doc in (("monitor.json", spec.monitor), ("curve.json", spec.curve_map(rd))):
            why = write_report(rd / name, json.dumps(doc, indent=1))
            if why:
                raise LaunchError(
                    f"cannot write {rd / name}: {why}; free some space or pass another --run-dir"
                )
        notes = list(claim.notes)
        if seconds is None and spec.seconds is not None and not spec.takes_seconds(nodes):
            seconds = spec.seconds  # else it bounds nothing: the launcher keeps it
            notes.append(
                f"seconds {spec.seconds:g}: no node takes ${{seconds}}, so the launch "
                "stops after that long"
            )
        if out is not None:
            make_folder(out)
            recorder, said = recorder_node(spec, nodes, out)
            nodes, notes = [recorder, *nodes], notes + said
        sup = Supervisor(spec, nodes, rd, host=host, seconds=seconds)
        for note in notes:
            sup.console.say(note)
        return sup.run()
    finally:
        claim.release()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The launcher's options, for `rtinfer launch` and `python -m rtinfer.launch.supervisor`."""
    p.add_argument("file", help="YAML launch file")
    p.add_argument("--host", default=None, help="run only this host's nodes (and host-less ones)")
    p.add_argument("--seconds", type=float, default=None, help="stop everything after S seconds")
    p.add_argument(
        "--run-dir",
        default=None,
        help="logs, ipc sockets, reports (default: a new runs/NAME-TIME[-N]; "
        "refused while another live run uses it)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override deadline_ms, seconds, run_dir, name, robots, realtime (false: "
        "no node's cpus or priority is applied), vars.NAME, rates.NAME or "
        "monitor.NAME",
    )
    p.add_argument("--check", action="store_true", help="validate only; start nothing")
    p.add_argument(
        "--record",
        default=None,
        metavar="RUN.mcap",
        help="record the run's messages as MCAP with ROS 2 schemas, for Foxglove, "
        "Rerun and `rtinfer report RUN.mcap` (needs rtinfer[record])",
    )


def run_args(a: argparse.Namespace) -> int:
    """Run from parsed `add_arguments` options (a command line's whole run: SIGINT/SIGTERM
    are ignored once it returns); prints a LaunchError and returns 2."""
    try:
        bad = [s for s in a.set if "=" not in s]
        if bad:
            raise LaunchError(f"--set {bad[0]!r}: expected KEY=VALUE")
        overrides = dict(s.split("=", 1) for s in a.set)
        code = run_file(
            a.file,
            host=a.host,
            seconds=a.seconds,
            run_dir=a.run_dir,
            overrides=overrides,
            check=a.check,
            record=a.record,
        )
    except LaunchError as exc:
        say("launch", str(exc), error=False)
        return 2
    # Everything is stopped and reported. A SIGTERM from here on (a parent stopping us just
    # as we finish) must not turn a clean exit into death by signal during interpreter exit.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m rtinfer.launch.supervisor", description=__doc__.split("\n")[0]
    )
    add_arguments(p)
    return run_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
