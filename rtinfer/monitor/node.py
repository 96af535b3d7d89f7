"""The deadline monitor: per-cycle latency by stage, node liveliness, clock offsets, policy.

    python -m rtinfer.monitor.node --listen ipc:///run/obs ipc:///run/act --control ipc:///run/ctl \
        --deadline-ms 100 --report monitor.json --seconds 60

Listens (SUB, connects) to every node's trace/health/heartbeat; binds the control
endpoint (PUB) for `budget`, `command` and heartbeat pings. Per controller `trace`
record: each latency stage of rtinfer.monitor.stages (e2e = apply - capture, ...) into a
LatencyHistogram. A record with fields.late_index (a waypoint the controller rejected past
the deadline, never applied) is a miss with latency recv - capture, and no stage sample
(the figures and what each counts: rtinfer.monitor.stages.DEFINITIONS). Cycles are told apart by
(node, cycle id, capture): a record counts a new cycle only if no earlier record of it did
(a late tail of an applied cycle, or a late waypoint 1 whose waypoint 0 never came, counts
right), and a cycle counts as missed at most once. The same counts and the e2e samples are
kept per trace node (a fleet's robots, up to MAX_ROBOTS; stages.RobotFigures): in health as
`cycles.NODE`, `misses.NODE` and `e2e_p50_ms.NODE` (p99, max), in the report under "robots".
Stamps of capture/recv/apply are on the trace node's clock and
obs_recv/first_token/publish on the policy node's; both are moved onto the monitor's
clock with the offsets estimated from heartbeat round trips before they are subtracted,
except where the estimate cannot be told from 0 (always on one host: stamps are then
compared as they are; see rtinfer.transport.peer_clock).
Budget: `requests` are the level changes this monitor asked for; `changes` are those the
policy node applied, from its own health (`budget_switches`): a --no-budget node applies none.
The report's `nodes` hold each node's liveliness and, from its last `health`, its state,
`counters` and `gauges` (`counters_as_of_s`: how long before the report that health came), so
a run's report has every process's counters, a policy node's too (it writes no report file).
On exit the monitor publishes one last `health` (state "stopped") from the same summary it
writes to --report, so a dashboard's final counts are the report's.
Time is read from clock= (the monotonic clock by default): a message's arrival (its "recv"
stamp, which the subscriber takes on it: liveliness, event times, the t3 of a ping's round
trip), the timers (pings, checks, republishing) and the report's ages all read it, so a
test steps it instead of sleeping.
Decisions come from monitor_policy.DeadlinePolicy. The monitor is NOT the safety layer:
the controller's own watchdog is; if this process dies the robot carries on safely.
Single-threaded; spin_once blocks up to timeout_ms.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable

import yaml

from rtinfer.monitor.policy import DeadlinePolicy, Event, MonitorConfig
from rtinfer.monitor.stages import (
    DEFINITIONS,
    POLICY_STAMPS,
    STAGES,
    RobotFigures,
    is_late,
    past_deadline,
    percentiles_ms,
    stage_samples,
)
from rtinfer.realtime.complaints import say
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.report_file import write_report
from rtinfer.realtime.spin import on_signals, spin
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.transport.liveliness import Liveliness
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import Envelope, now_ns

CHECK_EVERY_NS = 100_000_000  # liveliness / hold-clear checks at 10 Hz, not per message


CYCLE_MEMORY = 256  # cycles remembered for counting each once (~13 s at 20 Hz)
MAX_ROBOTS = 64  # trace nodes with figures of their own; the rest count in the fleet's only
FINAL_HEALTH_S = 0.2  # after the last health: time for libzmq to send it before close


# the monitor's own counters (beside its policy's)
COUNTERS = (
    "traces",
    "late_cycles",
    "trace_incomplete",
    "echoes",
    "echoes_foreign",
    "pings",
    "publish_dropped",
    "traces_untracked",
)


class Monitor:
    def __init__(
        self,
        listen: str | list[str],
        control: str,
        cfg: MonitorConfig | None = None,
        *,
        ctx=None,
        curve=None,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        """clock: the monitor's monotonic ns clock (every arrival, timer and age reads it)."""
        self.cfg = cfg = cfg or MonitorConfig()
        self.sub = Subscriber(
            listen, ["trace", "health", "heartbeat"], ctx=ctx, curve=curve, clock=clock
        )  # each message's "recv": its arrival on our clock
        self.pub = Publisher(control, cfg.name, ctx=ctx, curve=curve)
        self.clock = clock
        self.start_ns = clock()
        self.policy = DeadlinePolicy(cfg, self.start_ns)
        self.hist = {name: LatencyHistogram() for name, _, _ in STAGES}
        self.robots: dict[str, RobotFigures] = {}  # trace node -> its share of the figures
        # per node, from the arrival times (monitor clock) of all its messages
        self.live = Liveliness(alive_periods=cfg.dead_after_periods)
        self.last_health: dict[str, tuple[int, dict]] = {}  # node -> (arrival ns, its body)
        self.applied: dict[str, tuple[int, int]] = {}  # policy node -> (budget switches, level)
        self.clocks: dict[str, PeerClock] = {}  # node -> its clock, from ping round trips
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.running = True
        self._pings: dict[int, None] = {}  # t0 of recent pings: echoes must answer one
        self._cycles: dict[tuple, bool] = {}  # recent cycles -> counted as missed
        self._next_ping = self._next_check = self._next_republish = 0

    # --- loop -------------------------------------------------------------------------
    def spin_once(self, timeout_ms: int = 50) -> int:
        """Handle every queued message (waiting up to timeout_ms for the first), then the
        periodic work (pings, liveliness, hold/clear). Returns the messages handled."""
        n, env = 0, self.sub.recv(timeout_ms)
        while env is not None:
            self._on_message(env)
            n += 1
            env = self.sub.recv(0) if n < 1000 else None  # bound one call's work
        self._periodic(self.clock())
        return n

    def run(self, seconds: float | None = None) -> None:
        """Spin until stop() or `seconds` elapse."""
        spin(self, seconds, 20)

    def stop(self) -> None:
        self.running = False

    # --- messages ---------------------------------------------------------------------
    def _on_message(self, env: Envelope) -> None:
        t = env.stamps["recv"]
        body = env.body
        name = body["node"]
        self.live.note(name, t, self.cfg.period_ns(name))
        if env.topic == "trace":
            self._on_trace(body, t)
        elif env.topic == "health":
            self.last_health[name] = (t, body)
            c = body["counters"]
            if "budget_switches" in c:  # a policy node's own count of the levels it applied
                self.applied[name] = (c["budget_switches"], c.get("budget_level", 0))
        elif "echo" in body:
            self._on_echo(name, body, t)

    def _on_echo(self, name: str, body: dict, t3: int) -> None:
        echo = body["echo"]
        if echo["src"] != self.cfg.name or echo["sent_ns"] not in self._pings:
            self.counters["echoes_foreign"] += 1  # another monitor's, or a forged/stale one
            return
        self.counters["echoes"] += 1
        est = self.clocks.get(name)
        if est is None:
            est = self.clocks[name] = PeerClock(self.cfg.clock_window)
        est.echo(echo["sent_ns"], echo["recv_ns"], body["sent_ns"], t3)

    def _on_trace(self, body: dict, t: int) -> None:
        self.counters["traces"] += 1
        st = body["stamps"]
        robot, policy = self.clocks.get(body["node"]), self._policy_clock(body["node"])
        local = {}  # every stamp on the monitor's clock
        for k, v in st.items():
            est = policy if k in POLICY_STAMPS else robot
            local[k] = est.to_local(v) if est is not None else v
        fig = self._robot(body["node"])
        late = is_late(body)
        if late:
            self.counters["late_cycles"] += 1
        else:
            n = 0
            for name, ns in stage_samples(local):
                self.hist[name].record(ns)
                n += 1
                if name == "e2e" and fig is not None:
                    fig.e2e.record(ns)
            self.counters["trace_incomplete"] += len(STAGES) - n
        end = local.get("recv" if late else "apply")
        if "capture" in local and end is not None:
            e2e = end - local["capture"]
            # capture too: a restarted publisher may reuse cycle ids (raw stamp: it does
            # not move with the clock-offset estimate)
            key = (body["node"], body["cycle"], st.get("capture"))
            seen, missed = key in self._cycles, self._cycles.get(key, False)
            miss = late or past_deadline(body, e2e, self.policy.deadline_ns)  # DEFINITIONS
            self._cycles[key] = missed or miss
            if fig is not None:  # by the policy's own rules (on_cycle's new_cycle, count_miss)
                fig.cycles += not seen
                fig.misses += not missed and miss
            if len(self._cycles) > CYCLE_MEMORY:
                del self._cycles[next(iter(self._cycles))]
            for ev in self.policy.on_cycle(
                e2e, t, new_cycle=not seen, count_miss=not missed, late=late
            ):
                self._act(ev)

    def _robot(self, node: str) -> RobotFigures | None:
        """The figures of trace node `node` (made on its first record); None beyond
        MAX_ROBOTS nodes (its records still count in the fleet's figures)."""
        fig = self.robots.get(node)
        if fig is None:
            if len(self.robots) >= MAX_ROBOTS:
                self.counters["traces_untracked"] += 1
                return None
            fig = self.robots[node] = RobotFigures()
        return fig

    def _policy_clock(self, trace_node: str) -> PeerClock | None:
        """The policy node's clock: configured, else the one other node we have a clock for."""
        if self.cfg.policy_node is not None:
            return self.clocks.get(self.cfg.policy_node)
        others = [e for n, e in self.clocks.items() if n != trace_node]
        return others[0] if len(others) == 1 else None

    # --- periodic work and decisions -----------------------------------------------------
    def _periodic(self, now: int) -> None:
        cfg = self.cfg
        if cfg.ping_period_s > 0 and now >= self._next_ping:
            self._next_ping = now + int(cfg.ping_period_s * 1e9)
            t0 = self.clock()
            self._pings[t0] = None
            if len(self._pings) > 64:
                del self._pings[next(iter(self._pings))]
            self._send("heartbeat", {"node": cfg.name, "sent_ns": t0})
            self.counters["pings"] += 1
        if now >= self._next_check:
            self._next_check = now + CHECK_EVERY_NS
            for ev in self.policy.on_tick(self._check_liveliness(now), now):
                self._act(ev)
        if cfg.republish_s > 0 and now >= self._next_republish:
            self._next_republish = now + int(cfg.republish_s * 1e9)
            self._send("budget", {"level": self.policy.level, "reason": "periodic"})
            self._send("health", self.health())

    def budget(self) -> dict:
        """The budget figures (DEFINITIONS): the level and changes requested, and the changes
        and level the policy nodes applied (None while no policy node has reported them)."""
        p = self.policy
        applied = list(self.applied.values())
        return {
            "level": p.level,
            "requests": p.counters["budget_requests"],
            "changes": sum(a[0] for a in applied) if applied else None,
            "applied_level": max(a[1] for a in applied) if applied else None,
            "slack_p99_ms": p.last_slack_p99_ms,
        }

    def health(self, state: str | None = None) -> dict:
        """`health` body for dashboards: the fleet view in counters and ms gauges, the same
        figures as summary() (costs a few ms of percentile work, so it goes out at the
        republish rate, not per message). state: instead of "ok"/"holding" (the last
        health says "stopped")."""
        p, b = self.policy, self.budget()
        gauges = {}
        for stage in ("e2e", "ttft"):
            us = self.hist[stage].percentiles_us()
            gauges.update({f"{stage}_{q}_ms": us[q] / 1e3 for q in ("p50", "p99", "max")})
        counters = {
            "cycles": p.counters["cycles"],
            "misses": p.counters["misses"],
            "late_cycles": self.counters["late_cycles"],
            "holds": p.counters["holds"],
            "budget_requests": b["requests"],
            "level": p.level,
            "nodes_alive": sum(s.alive for s in self.live.values()),
            **{f"{name}_clamped": h.clamped for name, h in self.hist.items()},
        }
        if b["changes"] is not None:
            counters.update(budget_changes=b["changes"], applied_level=b["applied_level"])
        for node, fig in self.robots.items():  # each robot's share (a pass per histogram)
            r = fig.summary()
            counters.update({f"cycles.{node}": r["cycles"], f"misses.{node}": r["misses"]})
            gauges.update({f"e2e_{q}_ms.{node}": r["e2e_ms"][q] for q in ("p50", "p99", "max")})
        return {
            "node": self.cfg.name,
            "state": state or ("holding" if p.holding else "ok"),
            "counters": counters,
            "gauges": gauges,
        }

    def publish_final(self) -> None:
        """One last `health` (state "stopped"), then a moment for libzmq to send it (the
        bus closes with LINGER 0). Call it after the last message was handled."""
        self._send("health", self.health("stopped"))
        time.sleep(FINAL_HEALTH_S)

    def _check_liveliness(self, now: int) -> list[str]:
        """Update alive flags (events on change); the required nodes that are dead."""
        cfg, live = self.cfg, self.live
        for name, node in live.items():
            if live.check(name, cfg.period_ns(name), now):
                alive, silent_s = node.alive, (now - node.last_ns) / 1e9
                what = "is back" if alive else f"silent for {silent_s:.2f} s"
                self.policy.event(
                    now,
                    "node_alive" if alive else "node_dead",
                    f"{name} {what}",
                    {"node": name, "silent_s": silent_s},
                )
        in_grace = now - self.start_ns < cfg.startup_grace_s * 1e9
        return [
            n
            for n in cfg.required
            if (n in live and not live[n].alive) or (n not in live and not in_grace)
        ]

    def _act(self, ev: Event) -> None:
        if ev.kind == "budget":
            self._send("budget", {"level": self.policy.level, "reason": ev.reason})
        elif ev.kind in ("safe_hold", "clear"):
            self._send("command", {"cmd": ev.kind, "reason": ev.reason})

    def _send(self, topic: str, body: dict) -> None:
        if not self.pub.publish(topic, body):
            self.counters["publish_dropped"] += 1

    # --- reporting --------------------------------------------------------------------
    def summary(self) -> dict:
        """Everything a report needs (JSON-ready); costs a few ms: not for the hot path."""
        p, now = self.policy, self.clock()
        stages = {name: percentiles_ms(h) for name, h in self.hist.items()}
        nodes = {
            n: {
                "alive": s.alive,
                "state": self.state_of(n),
                "messages": s.count,
                "missed_periods": s.missed,
                "deaths": s.deaths,
                "silent_s": (now - s.last_ns) / 1e9,
                **self._last_counts(n, now),
            }
            for n, s in self.live.items()
        }
        return {
            "deadline_ms": self.cfg.deadline_ms,
            "cycles": p.counters["cycles"],
            "misses": p.counters["misses"],
            "late_cycles": self.counters["late_cycles"],
            "miss_rate": p.counters["misses"] / max(p.counters["cycles"], 1),
            "budget": self.budget(),
            "holds": p.counters["holds"],
            "clears": p.counters["clears"],
            "holding": p.holding,
            "stages_ms": stages,
            "nodes": nodes,
            "clocks": {n: e.report() for n, e in self.clocks.items()},
            "robots": {n: fig.summary() for n, fig in self.robots.items()},
            "counters": {**self.counters, **self.sub.counters},
            "events": [e.to_dict() for e in p.events],
            "definitions": DEFINITIONS,
        }

    def state_of(self, node: str) -> str:
        """The state `node` gave in its last health ("" before any came)."""
        last = self.last_health.get(node)
        return "" if last is None else last[1]["state"]

    def _last_counts(self, node: str, now: int) -> dict:
        """A node's counters and gauges from its last health, and how long before `now` it
        came (counters_as_of_s): what it counted after that is not in them."""
        if node not in self.last_health:
            return {}
        t, body = self.last_health[node]
        return {
            "counters": dict(body["counters"]),
            "gauges": dict(body.get("gauges", {})),
            "counters_as_of_s": (now - t) / 1e9,
        }

    def close(self) -> None:
        self.sub.close()
        self.pub.close()


def drain(mon: Monitor, quiet_ms: int = 50, most_s: float = 0.5) -> None:
    """Handle what is still queued or in flight at a stop (the robots stop first, their last
    traces may not have landed yet) until quiet_ms pass with nothing, at most most_s."""
    end = time.monotonic() + most_s
    while mon.spin_once(quiet_ms) and time.monotonic() < end:
        pass


def load_config(path: str | None, **overrides) -> MonitorConfig:
    """MonitorConfig from a YAML file (its `monitor:` section, or the whole file)."""
    d = {}
    if path:
        with open(path) as f:
            d = yaml.safe_load(f) or {}
        d = d.get("monitor", d)
    d.update({k: v for k, v in overrides.items() if v is not None})
    return MonitorConfig.from_dict(d)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m rtinfer.monitor.node", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--listen", nargs="+", required=True, help="endpoints to connect (trace/health/heartbeat)"
    )
    ap.add_argument("--control", required=True, help="endpoint to bind for budget/command/pings")
    ap.add_argument("--config", default=None, help="YAML file with a monitor: section")
    ap.add_argument("--deadline-ms", type=float, default=None)
    ap.add_argument(
        "--required", nargs="*", default=None, help="nodes whose death orders safe_hold"
    )
    ap.add_argument("--name", default=None)
    ap.add_argument("--report", default=None, help="write the summary JSON here on exit")
    ap.add_argument("--seconds", type=float, default=None)
    add_curve_arguments(ap)
    a = ap.parse_args(argv)
    curve = curve_from_args(ap, a, binds=[a.control], connects=a.listen)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = load_config(
        a.config,
        deadline_ms=a.deadline_ms,
        name=a.name,
        required=tuple(a.required) if a.required is not None else None,
    )
    mon = Monitor(a.listen, a.control, cfg, curve=curve)
    with on_signals(lambda _signum: mon.stop()):  # a late signal must not cut the report
        print(f"{cfg.name}: ready (deadline {cfg.deadline_ms:g} ms)", flush=True)
        try:
            mon.run(a.seconds)
        finally:
            drain(mon)
            report = mon.summary()
            mon.publish_final()
            mon.close()
            why = write_report(a.report, json.dumps(report, indent=1)) if a.report else None
            if why:
                say(cfg.name, f"report {a.report} not written: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
