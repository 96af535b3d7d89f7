"""What the deadline monitor decides: budget level, safe_hold and clear, with reasons.

Inputs are one end-to-end latency per cycle (`on_cycle`) and, now and then, the list
of required nodes that are dead (`on_tick`). Outputs are `Event`s; the Monitor turns
them into `budget` / `command` messages. Pure bookkeeping over explicit times (ns): no
clock reads, no sockets, so every decision is reproducible in a test. Not thread-safe.

- budget: every `eval_every` cycles, p99 of the last `window` e2e latencies (one
  np.partition over a preallocated ring). slack = deadline - p99. slack below
  `shed_margin_ms` -> level + 1 (shed compute: cheaper inference); slack above
  `restore_margin_ms` (> the shed margin: the hysteresis band) for `raise_patience`
  evaluations in a row -> level - 1. Both margins default to the fractions of the deadline
  that the node's own budget uses (rtinfer.realtime.deadline). After any change the window
  restarts, so the next decision only sees cycles run at the new level.
- safe_hold: `hold_after_misses` consecutive misses (e2e > deadline, or late), or a required node
  dead. clear: in hold, no miss and no dead required node for `clear_after_s`. (No cycles
  run during a hold, so recovery is judged by time, not by cycles.)
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field, fields

import numpy as np

from rtinfer.realtime.deadline import DEADLINE_MS, restore_margin_ms, shed_margin_ms

log = logging.getLogger("rtinfer.monitor.node")
RENAMED = {"lower_margin_ms": "shed_margin_ms", "raise_margin_ms": "restore_margin_ms"}
EVENT_MEMORY = 10000  # events kept for the report (the newest); was the key max_events
GONE = {
    "max_events": f"the monitor keeps its newest {EVENT_MEMORY} events "
    "(rtinfer.monitor.policy.EVENT_MEMORY); remove the key"
}


@dataclass
class MonitorConfig:
    name: str = "monitor"
    deadline_ms: float = DEADLINE_MS
    window: int = 50  # cycles in the sliding p99 window
    eval_every: int = 10  # cycles between window evaluations
    min_samples: int = 20  # a window this full before the budget may move
    shed_margin_ms: float | None = None  # p99 slack below this: shed compute (level + 1);
    # None: SHED_BELOW of the deadline
    restore_margin_ms: float | None = None  # p99 slack above this ... (None: RESTORE_ABOVE
    # of the deadline)
    raise_patience: int = 3  # ... for this many evaluations: raise it (level - 1)
    max_level: int = 4
    hold_after_misses: int = 5  # consecutive misses -> safe_hold
    clear_after_s: float = 2.0  # healthy this long in a hold -> clear
    required: tuple[str, ...] = ()  # nodes whose death orders safe_hold
    node_period_s: float = 1.0  # expected message period of a node ...
    node_periods: dict = field(default_factory=dict)  # ... or per node {name: period_s}
    dead_after_periods: float = 3.0  # this many periods without any message: dead
    startup_grace_s: float = 5.0  # a required node never heard of is dead only after this
    ping_period_s: float = 0.5  # heartbeat pings for clock offsets (0: none)
    clock_window: int = 32  # round trips kept per node (min-RTT filter)
    policy_node: str | None = None  # clock of obs_recv/first_token/publish; None: guess
    republish_s: float = 1.0  # re-send the budget level (and a hold) this often

    def __post_init__(self) -> None:
        if self.shed_margin_ms is None:
            self.shed_margin_ms = shed_margin_ms(self.deadline_ms)
        if self.restore_margin_ms is None:
            self.restore_margin_ms = restore_margin_ms(self.deadline_ms)

    @classmethod
    def from_dict(cls, d: dict | None) -> MonitorConfig:
        """From a YAML `monitor:` section; unknown keys are an error (typos must not pass)."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        renamed = {k: RENAMED[k] for k in d if k in RENAMED}
        if renamed:
            raise ValueError(
                "monitor config keys renamed: "
                + ", ".join(f"{old} -> {new}" for old, new in renamed.items())
                + " (same meaning)"
            )
        gone = [f"{k}: {GONE[k]}" for k in d if k in GONE]
        if gone:
            raise ValueError("monitor config key gone: " + "; ".join(gone))
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown monitor config keys {unknown}; known: {sorted(known)}")
        if "required" in d:
            d["required"] = tuple(d["required"])
        cfg = cls(**d)
        if cfg.restore_margin_ms <= cfg.shed_margin_ms:
            raise ValueError("restore_margin_ms must exceed shed_margin_ms (hysteresis band)")
        if cfg.window < 1 or cfg.eval_every < 1 or cfg.hold_after_misses < 1:
            raise ValueError("window, eval_every and hold_after_misses must be >= 1")
        return cfg

    def period_ns(self, node: str) -> int:
        return int(self.node_periods.get(node, self.node_period_s) * 1e9)


@dataclass
class Event:
    """One decision or observation: when (monitor clock, ns), what, why, with which numbers."""

    t_ns: int
    kind: str  # budget | safe_hold | clear | node_dead | node_alive
    reason: str
    values: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"t_ns": self.t_ns, "kind": self.kind, "reason": self.reason, "values": self.values}


class DeadlinePolicy:
    def __init__(self, cfg: MonitorConfig, start_ns: int = 0) -> None:
        self.cfg = cfg
        self.deadline_ns = int(cfg.deadline_ms * 1e6)
        self.level = 0
        self.holding = False
        self.events: deque[Event] = deque(maxlen=EVENT_MEMORY)
        self.counters = dict.fromkeys(
            ("cycles", "misses", "budget_requests", "holds", "clears", "evaluations"), 0
        )
        self.consecutive_misses = 0
        self.last_slack_p99_ms: float | None = None
        self._ring = np.zeros(cfg.window, np.int64)  # e2e ns, preallocated
        self._n = 0  # samples in the ring since the last restart
        self._calm = 0  # evaluations in a row above the raise margin
        self._last_bad_ns = start_ns  # newest miss or dead required node

    def on_cycle(
        self,
        e2e_ns: int,
        now_ns: int,
        *,
        new_cycle: bool = True,
        count_miss: bool = True,
        late: bool = False,
    ) -> list[Event]:
        """One cycle's end-to-end latency (ns); returns the decisions it caused. new_cycle
        False: another record of a cycle already counted (e.g. a late waypoint: its age is
        the sample, so the budget window sees late tails too); it counts no cycle and no
        evaluation. count_miss False: that cycle was counted as missed already; the sample
        still enters the window. late: the controller dropped a waypoint of it as late
        (never applied), a miss whatever e2e_ns says (a chunk that arrived in time but whose
        first setpoint would have gone out past the deadline: late_applies)."""
        c, cfg = self.counters, self.cfg
        c["cycles"] += new_cycle
        self._ring[self._n % cfg.window] = e2e_ns
        self._n += 1
        out: list[Event] = []
        if count_miss and (late or e2e_ns > self.deadline_ns):
            c["misses"] += 1
            self.consecutive_misses += 1
            self._last_bad_ns = now_ns
            if self.consecutive_misses >= cfg.hold_after_misses and not self.holding:
                out.append(
                    self._hold(
                        now_ns,
                        f"{self.consecutive_misses} consecutive deadline misses",
                        {"e2e_ms": e2e_ns / 1e6},
                    )
                )
        elif count_miss:
            self.consecutive_misses = 0
        if new_cycle and self._n >= cfg.min_samples and c["cycles"] % cfg.eval_every == 0:
            ev = self._evaluate(now_ns)
            if ev is not None:
                out.append(ev)
        return out

    def on_tick(self, dead_required: list[str], now_ns: int) -> list[Event]:
        """Periodic check (a few Hz): hold while a required node is dead, clear when healthy."""
        if dead_required:
            self._last_bad_ns = now_ns
            if not self.holding:
                return [
                    self._hold(
                        now_ns,
                        f"required node dead: {', '.join(dead_required)}",
                        {"dead": list(dead_required)},
                    )
                ]
        elif self.holding and now_ns - self._last_bad_ns >= self.cfg.clear_after_s * 1e9:
            self.holding, self.consecutive_misses = False, 0
            self.counters["clears"] += 1
            return [
                self.event(
                    now_ns,
                    "clear",
                    f"healthy for {self.cfg.clear_after_s:g} s",
                    {"healthy_s": (now_ns - self._last_bad_ns) / 1e9},
                )
            ]
        return []

    def _evaluate(self, now_ns: int) -> Event | None:
        cfg = self.cfg
        self.counters["evaluations"] += 1
        n = min(self._n, cfg.window)
        win = self._ring[:n].copy()  # partition works in place; the ring keeps its order
        k = min(n - 1, int(np.ceil(0.99 * n)) - 1)
        p99 = int(np.partition(win, k)[k])
        slack_ms = (self.deadline_ns - p99) / 1e6
        self.last_slack_p99_ms = slack_ms
        vals = {"slack_p99_ms": slack_ms, "p99_ms": p99 / 1e6, "window": n}
        if slack_ms < cfg.shed_margin_ms:
            self._calm = 0
            if self.level < cfg.max_level:
                return self._set_level(
                    self.level + 1,
                    now_ns,
                    f"p99 slack {slack_ms:.1f} ms < {cfg.shed_margin_ms:g} ms margin",
                    vals,
                )
        elif slack_ms > cfg.restore_margin_ms and self.level > 0:
            self._calm += 1
            if self._calm >= cfg.raise_patience:
                return self._set_level(
                    self.level - 1,
                    now_ns,
                    f"p99 slack {slack_ms:.1f} ms > "
                    f"{cfg.restore_margin_ms:g} ms for {self._calm} "
                    f"evaluations",
                    vals,
                )
        else:
            self._calm = 0
        return None

    def _set_level(self, level: int, now_ns: int, reason: str, vals: dict) -> Event:
        vals["from"], vals["to"] = self.level, level
        self.level, self._calm, self._n = level, 0, 0  # restart the window at the new level
        self.counters["budget_requests"] += 1
        return self.event(now_ns, "budget", reason, vals)

    def _hold(self, now_ns: int, reason: str, vals: dict) -> Event:
        self.holding = True
        self.counters["holds"] += 1
        return self.event(now_ns, "safe_hold", reason, vals)

    def event(self, now_ns: int, kind: str, reason: str, vals: dict) -> Event:
        """Record (and log, one line) a decision or observation."""
        ev = Event(now_ns, kind, reason, vals)
        self.events.append(ev)
        log.log(
            logging.WARNING if kind in ("safe_hold", "node_dead") else logging.INFO,
            "%s: %s (%s)",
            kind,
            reason,
            ", ".join(f"{k}={v}" for k, v in vals.items()),
        )
        return ev
