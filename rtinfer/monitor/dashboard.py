"""Live terminal dashboard: the latest `health` of every node, as one rich table.

Listens to the endpoints of a running launch (robot, policy, monitor) and keeps only the
newest health body per node; rendering reads those. The monitor's figures are shown as its
health states them, by the definitions of rtinfer.monitor.stages; once the monitor has
stopped, its last health carries the same counts as its report (`final`). Not on any
real-time path.
"""
from __future__ import annotations

import time

from rich.table import Table

from rtinfer.transport.bus import Subscriber


class Dashboard:
    def __init__(self, endpoints: list[str], title: str = "rtinfer demo"):
        self.sub = Subscriber(endpoints, ["health"], latest_only=False)
        self.title, self.latest, self.t0 = title, {}, time.monotonic()
        self._ticks = (0.0, 0)   # (publish time s, controller ticks) of the rate's last sample
        self._ctl = (0.0, 0)     # the same, of the newest controller health
        self.loop_hz = 0.0

    def poll(self, timeout_ms: int = 100) -> None:
        env = self.sub.recv(timeout_ms)
        while env is not None:
            self.latest[env.body["node"]] = env.body
            if env.body["node"] in ("controller", "controller-0"):  # sender-timed: no jitter
                sent = env.stamps.get("publish", env.stamps.get("recv", 0))
                self._ctl = (sent / 1e9, env.body["counters"].get("ticks", 0))
            env = self.sub.recv(0)

    def _get(self, node: str, kind: str, key: str, default=0):
        return self.latest.get(node, {}).get(kind, {}).get(key, default)

    def _sum(self, node: str, key: str) -> int:
        """A counter of `node`, or summed over a fleet's `node-0`, `node-1`, ..."""
        return sum(b.get("counters", {}).get(key, 0) for n, b in self.latest.items()
                   if n == node or n.startswith(node + "-"))

    @property
    def final(self) -> bool:
        """The monitor's last health has come: its counts are those of its report."""
        return self.latest.get("monitor", {}).get("state") == "stopped"

    def _budget(self) -> str:
        mon = lambda k, d=0: self._get("monitor", "counters", k, d)  # noqa: E731
        requested = f"{mon('budget_requests')} requested"
        if mon("budget_changes", None) is None:  # no policy node reports what it applied
            return f"level {mon('level')} requested ({requested}; none reported applied)"
        return f"level {mon('applied_level')}  ({mon('budget_changes')} changes applied, {requested})"

    def _latency(self, stage: str, quantiles: tuple[str, ...], digits: int) -> str:
        g = lambda q: self._get("monitor", "gauges", f"{stage}_{q}_ms")  # noqa: E731
        text = " / ".join(f"{g(q):.{digits}f}" for q in quantiles) + " ms"
        clamped = self._get("monitor", "counters", f"{stage}_clamped")
        return text + (f"  ({clamped} clamped)" if clamped else "")

    def render(self) -> Table:
        now = time.monotonic()
        # from the controller's own health messages (their publish stamps), so the rate holds
        # its last value once the loop has stopped instead of decaying with the render clock
        (t, ticks), (t_prev, n_prev) = self._ctl, self._ticks
        if t > t_prev + 0.5 and ticks >= n_prev:
            self.loop_hz = (ticks - n_prev) / (t - t_prev) if n_prev else 0.0
            self._ticks = (t, ticks)
        cell = lambda k: self._sum("cell", k)  # noqa: E731
        mon = lambda kind, k: self._get("monitor", kind, k)  # noqa: E731
        pol = lambda k: self._get("policy", "counters", k)  # noqa: E731
        drafted = pol("chunk.drafted") + pol("self.drafted")
        acc = (pol("chunk.accepted") + pol("self.accepted")) / drafted if drafted else None
        final = "final, as the monitor's report" if self.final else f"{now - self.t0:.0f} s"
        t = Table(title=f"{self.title}  ({final})", show_header=False)
        t.add_column("what", style="bold")
        t.add_column("value", justify="right")
        rows = [
            ("objects sorted / wrong / missed / dropped",
             f"{cell('correct')} / {cell('wrong')} / {cell('missed')} / {cell('dropped')}"),
            ("control loop rate", f"{self.loop_hz:.0f} Hz  (late ticks {self._sum('controller', 'late_ticks')})"),
            ("e2e p50 / p99 / max (applied chunks)", self._latency("e2e", ("p50", "p99", "max"), 1)),
            ("TTFT p50 / p99", self._latency("ttft", ("p50", "p99"), 2)),
            ("deadline misses / cycles",
             f"{mon('counters', 'misses')} / {mon('counters', 'cycles')}  "
             f"({mon('counters', 'late_cycles')} late waypoints: never applied, so in no e2e)"),
            ("budget", self._budget()),
            ("holds (watchdog / ordered)",
             f"{self._sum('controller', 'holds')} / {mon('counters', 'holds')}"),
            ("speculative acceptance", "-" if acc is None else f"{acc:.2f}"),
        ]
        for name, body in sorted(self.latest.items()):  # a fleet: one row per cell
            if name.startswith("cell-") and "spawned" in body.get("counters", {}):
                c = body["counters"]
                rows.append((f"{name}: sorted / wrong / missed",
                             f"{c['correct']} / {c['wrong']} / {c['missed']}"))
        errors = self.errors()
        if errors:
            rows.append(("[bold red]errors[/]", "[red]" + "; ".join(errors) + "[/]"))
        for r in rows:
            t.add_row(*r)
        return t

    def errors(self) -> list[str]:
        """Input dropped that means a policy is not being followed, and a robot that does
        not answer: one phrase each."""
        ctl = lambda k: self._sum("controller", k)  # noqa: E731
        fleet = any(n.startswith("controller-") for n in self.latest)
        out = []
        if ctl("rejected_hash"):
            out.append(f"{ctl('rejected_hash')} chunks of another spec (hash) rejected")
        if ctl("rejected_dest") and not fleet:  # in a fleet: the other robots' chunks
            out.append(f"{ctl('rejected_dest')} chunks for another robot rejected")
        if ctl("rejected_bad"):
            out.append(f"{ctl('rejected_bad')} malformed waypoints rejected")
        faults = [f"{ctl(k)} failed {k.split('_')[0]}s" for k in ("read_faults", "write_faults")
                  if ctl(k)]
        if faults:
            out.append("robot hardware: " + ", ".join(faults) + " (the robot held)")
        if self._get("policy", "counters", "obs_bad"):
            out.append(f"{self._get('policy', 'counters', 'obs_bad')} observations did not "
                       f"fit the policy's model")
        return out

    def close(self) -> None:
        self.sub.close()
