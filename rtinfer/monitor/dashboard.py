"""Live terminal dashboard: the latest `health` of every node, as one rich table.

Listens to the endpoints of a running launch (robot, policy, monitor) and keeps only the
newest health body per node; rendering reads those. Not on any real-time path.
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
            if env.body["node"] == "controller":  # timed by the sender: no poll jitter
                sent = env.stamps.get("publish", env.stamps.get("recv", 0))
                self._ctl = (sent / 1e9, env.body["counters"].get("ticks", 0))
            env = self.sub.recv(0)

    def _get(self, node: str, kind: str, key: str, default=0):
        return self.latest.get(node, {}).get(kind, {}).get(key, default)

    def render(self) -> Table:
        now = time.monotonic()
        # from the controller's own health messages (their publish stamps), so the rate holds
        # its last value once the loop has stopped instead of decaying with the render clock
        (t, ticks), (t_prev, n_prev) = self._ctl, self._ticks
        if t > t_prev + 0.5 and ticks >= n_prev:
            self.loop_hz = (ticks - n_prev) / (t - t_prev) if n_prev else 0.0
            self._ticks = (t, ticks)
        cell = lambda k: self._get("cell", "counters", k)  # noqa: E731
        mon = lambda kind, k: self._get("monitor", kind, k)  # noqa: E731
        pol = lambda k: self._get("policy", "counters", k)  # noqa: E731
        drafted = pol("chunk.drafted") + pol("self.drafted")
        acc = (pol("chunk.accepted") + pol("self.accepted")) / drafted if drafted else None
        t = Table(title=f"{self.title}  ({now - self.t0:.0f} s)", show_header=False)
        t.add_column("what", style="bold")
        t.add_column("value", justify="right")
        rows = [
            ("objects sorted / wrong / missed / dropped",
             f"{cell('correct')} / {cell('wrong')} / {cell('missed')} / {cell('dropped')}"),
            ("control loop rate", f"{self.loop_hz:.0f} Hz  (late ticks {self._get('controller', 'counters', 'late_ticks')})"),
            ("e2e latency p50 / p99 / max",
             f"{mon('gauges', 'e2e_p50_ms'):.1f} / {mon('gauges', 'e2e_p99_ms'):.1f} / "
             f"{mon('gauges', 'e2e_max_ms'):.1f} ms"),
            ("TTFT p50 / p99", f"{mon('gauges', 'ttft_p50_ms'):.2f} / {mon('gauges', 'ttft_p99_ms'):.2f} ms"),
            ("deadline misses / cycles", f"{mon('counters', 'misses')} / {mon('counters', 'cycles')}"),
            ("budget level (changes)", f"{mon('counters', 'level')} ({mon('counters', 'budget_changes')})"),
            ("holds (watchdog / ordered)",
             f"{self._get('controller', 'counters', 'holds')} / {mon('counters', 'holds')}"),
            ("speculative acceptance", "-" if acc is None else f"{acc:.2f}"),
        ]
        for r in rows:
            t.add_row(*r)
        return t

    def close(self) -> None:
        self.sub.close()
