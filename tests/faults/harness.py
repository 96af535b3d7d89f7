"""Fault-test harness: the real SimNode, instrumented from the robot's side.

`Recorder` chains onto the ControllerNode's on_tick hook, so it sees every tick on the
controller's own clock: each state change (with the watchdog's last-fresh time), every
cycle's e2e at apply, and every written force checked against the force limit.

Run as a process (e.g. inside a network namespace) it writes one JSON report:

    python -m tests.faults.harness --obs E --actions E --seconds S --out F \
        [--curve-secret K --curve-map M]

The CURVE options are those of the product nodes (rtinfer.transport.curve.curve_configs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from rtinfer.transport.curve import curve_configs


class Recorder:
    """Per-tick observer of sim.node (a ControllerNode). Not thread-safe: runs in the loop."""

    def __init__(self, sim):
        self.sim, self.node = sim, sim.node
        self.inner = self.node.on_tick
        self.node.on_tick = self._on_tick
        self.flim = np.asarray(self.node.cfg.control.axis("effort_limit"), float)
        self.transitions: list[tuple[int, str, int]] = []  # (now_ns, new state, last_fresh_ns)
        self.state = self.node.state
        self.force_over_limit = 0
        self.max_force_ratio = 0.0
        self.max_gap_ns = 0  # longest time between two ticks
        self._last_tick = None
        self.ready_file: str | None = None  # touched when tracking first starts

    def _on_tick(self, state, now_ns: int) -> None:
        if self.inner is not None:
            self.inner(state, now_ns)
        node = self.node
        ratio = float(np.max(np.abs(node.stack.cmd.value) / self.flim))
        self.max_force_ratio = max(self.max_force_ratio, ratio)
        if ratio > 1.0 + 1e-9:
            self.force_over_limit += 1
        if node.state != self.state:
            self.state = node.state
            self.transitions.append((now_ns, node.state, node.watchdog.last_fresh_ns or 0))
            if self.ready_file and node.state == "run":
                open(self.ready_file, "w").close()
                self.ready_file = None
        if self._last_tick is not None:
            self.max_gap_ns = max(self.max_gap_ns, now_ns - self._last_tick)
        self._last_tick = now_ns

    def holds(self) -> list[dict]:
        """Each run -> hold: time from the last fresh chunk to the hold (controller clock)."""
        out, prev = [], None
        for t, s, fresh in self.transitions:
            if s == "hold" and prev == "run":
                out.append({"at_ns": t, "after_fresh_ms": (t - fresh) / 1e6})
            prev = s
        return out

    def resumes(self) -> list[int]:
        """Times (ns) of each hold -> run."""
        out, prev = [], None
        for t, s, _ in self.transitions:
            if s == "run" and prev == "hold":
                out.append(t)
            prev = s
        return out

    def summary(self) -> dict:
        n = self.node
        return {
            "transitions": self.transitions,
            "holds": self.holds(),
            "resumes": self.resumes(),
            "force_over_limit": self.force_over_limit,
            "max_force_ratio": self.max_force_ratio,
            "max_tick_gap_ms": self.max_gap_ns / 1e6,
            "e2e_max_ms": n.reports.e2e_max_ns / 1e6,
            "deadline_ms": n.cfg.deadline_ns / 1e6,
            "counters": dict(n.counters),
            "stack": dict(n.stack.counters),
            "metrics": self.sim.cell.metrics.as_dict(),
            "sub": dict(self.sim.sub.counters),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--obs", required=True)
    ap.add_argument("--actions", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline-ms", type=float, default=100.0)
    ap.add_argument("--curve-secret", default=None)
    ap.add_argument("--curve-map", default=None)
    ap.add_argument("--ready", default=None, help="file to create once tracking starts")
    a = ap.parse_args(argv)
    curve = curve_configs(
        binds=[a.obs], connects=[a.actions], secret=a.curve_secret, curve_map=a.curve_map
    )
    from examples.conveyor_sorting import sim_node

    sim = sim_node.SimNode(a.obs, a.actions, deadline_ms=a.deadline_ms, curve=curve)
    rec = Recorder(sim)
    rec.ready_file = a.ready
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sim.stop())
    try:
        report = sim.run(a.seconds, wait_s=60.0)
    finally:
        sim.close()
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"report": report, **rec.summary()}, f)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
