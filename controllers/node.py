"""ControllerNode: the robot-side 1 kHz loop, update() -> compute() -> publish().

update(): drain action_chunk and command messages without blocking. Each action_chunk
message is one waypoint; waypoints of a cycle are assembled as they stream and the
tracker starts on waypoint 0 before the rest arrive. Tokens are the source of truth:
they are decoded here and the message's `values` must agree with them. Rejected, and
counted per message: capture older than the deadline or older than the chunk in use
(rejected_stale), wrong tokenizer hash (rejected_hash), bad tokens or inconsistent
fields (rejected_bad), anything while in a commanded safe_hold (rejected_hold).
Local watchdog: no fresh chunk for a deadline past the expected chunk interval
(`chunk_interval_ns`, the policy's period) -> hold (brake within limits, keep suction);
the next fresh chunk resumes. compute(): ControlStack -> HardwareInterface.write().
publish(): `health` at health_hz and, per cycle, a `trace` record with an "apply" stamp.
A waypoint that arrives past the deadline is never applied; the first such waypoint of a
cycle also goes out as a `trace` record without "apply" (fields.late_index = its index,
stamps up to "recv"), so the monitor counts the cycle as a deadline miss.
The node's Subscriber must be on ["action_chunk", "command"] and NOT latest_only (that
would drop waypoints). Not thread-safe: run it from one thread.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport.wire import Envelope, WireError, now_ns as clock_ns

from .hardware import HardwareInterface, RobotState
from .stack import ControlConfig, ControlStack
from .watchdog import Watchdog

COUNTERS = ("ticks", "late_ticks", "chunks_accepted", "waypoints_accepted", "rejected_stale",
            "late_waypoints", "rejected_bad", "rejected_hash", "rejected_hold", "holds",
            "commands")


@dataclass
class ControllerConfig:
    tokenizer: TokenizerConfig
    control: ControlConfig = field(default_factory=ControlConfig)
    name: str = "controller"
    deadline_ns: int = 100_000_000
    chunk_interval_ns: int = 0           # expected time between fresh chunks (policy period);
    # set it whenever the deadline is shorter than that period, or the watchdog holds the
    # robot between every two chunks
    health_hz: float = 10.0
    max_msgs_per_tick: int = 32          # bounds update()'s work under a flood
    max_period_ns: int = 1_000_000_000   # a waypoint period longer than this is bogus

    @classmethod
    def from_dict(cls, d: dict) -> "ControllerConfig":
        """From YAML data: "tokenizer" is a dict or the path of a saved TokenizerConfig."""
        d = dict(d)
        tok = d.pop("tokenizer")
        tok = TokenizerConfig.load(tok) if isinstance(tok, str) else TokenizerConfig.from_dict(tok)
        return cls(tokenizer=tok, control=ControlConfig.from_dict(d.pop("control", {})), **d)


class ControllerNode:
    def __init__(self, hw: HardwareInterface, cfg: ControllerConfig, sub, pub,
                 tokenizer_hash: str | None = None, *, trace=None,
                 on_tick: Callable[[RobotState, int], None] | None = None):
        """sub/pub: rtinfer.transport.bus Subscriber/Publisher (not owned: the caller closes them).
        tokenizer_hash: the hash chunks must carry; must match cfg.tokenizer. trace: an
        optional rtinfer.realtime.trace.TraceWriter. on_tick(state, now_ns): called every tick after
        the command is written (e.g. a sim publishing `obs` from the same loop)."""
        if tokenizer_hash is not None and tokenizer_hash != cfg.tokenizer.hash:
            raise ValueError(f"tokenizer hash {tokenizer_hash} does not match the node's "
                             f"tokenizer config ({cfg.tokenizer.hash}): ship them together")
        self.hw, self.cfg, self.sub, self.pub, self.trace, self.on_tick = \
            hw, cfg, sub, pub, trace, on_tick
        self.tokenizer_hash = cfg.tokenizer.hash
        self.tok = ActionTokenizer(cfg.tokenizer)
        self.stack = ControlStack(cfg.control)
        self.watchdog = Watchdog(cfg.deadline_ns, cfg.chunk_interval_ns)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.state = "idle"   # idle (no chunk yet) | run | hold | safe_hold | stopped
        self.e2e = LatencyHistogram()  # apply - capture per cycle, ns
        self.e2e_last_ns = self.e2e_max_ns = 0
        h, d = cfg.tokenizer.horizon, cfg.tokenizer.dim
        self._wps, self._got = np.zeros((h, d)), np.zeros(h, bool)
        self._key = None      # (src, cycle, capture) of the chunk being assembled / tracked
        self._capture_ns = self._period_ns = self._count = self._applied = 0
        self._stamps: dict = {}
        self._apply_pending = False
        self._late_key = None  # the last cycle reported late (once per cycle)
        self._health_period_ns = int(1e9 / cfg.health_hz)
        self._next_health_ns = 0
        self._tol = self.tok.bin_width / 2 + 1e-6  # values vs decoded tokens (float32 slack)

    # -- the loop ---------------------------------------------------------------------
    def tick(self, now_ns: int | None = None) -> None:
        """One iteration. now_ns: the loop's clock (tests pass it explicitly; then the
        "apply" stamp uses it too, so a test is deterministic)."""
        explicit = now_ns is not None
        now = now_ns if explicit else clock_ns()
        self.update(now)
        state = self.hw.read()
        self.hw.write(self.stack.compute(state, now))
        if self._apply_pending:
            self._record_apply(now if explicit else clock_ns())
        if self.on_tick is not None:
            self.on_tick(state, now)
        self.publish(now)
        self.counters["ticks"] += 1

    def run(self, seconds: float | None = None) -> None:
        """Tick at control.rate_hz for `seconds` (None: until a `stop` command)."""
        from rtinfer.realtime.rate import RateKeeper  # tick() alone needs no realtime kit
        rk = RateKeeper(self.cfg.control.rate_hz, self.cfg.name)
        end = None if seconds is None else clock_ns() + int(seconds * 1e9)
        while self.state != "stopped" and (end is None or clock_ns() < end):
            self.tick()
            rk.keep_time()
            self.counters["late_ticks"] = rk.late_ticks

    def update(self, now: int) -> None:
        for _ in range(self.cfg.max_msgs_per_tick):
            env = self.sub.recv(timeout_ms=0)
            if env is None:
                break
            if env.topic == "action_chunk":
                self._on_waypoint(env, now)
            elif env.topic == "command":
                self._on_command(env.body["cmd"], now)
        if self.state == "run" and self.watchdog.expired(now):
            self._hold("hold", now)

    def publish(self, now: int) -> None:
        if now < self._next_health_ns:
            return
        self._next_health_ns = now + self._health_period_ns
        gauges = {"e2e_last_ms": self.e2e_last_ns / 1e6, "e2e_max_ms": self.e2e_max_ns / 1e6,
                  "holding": float(self.stack.holding)}
        self.pub.publish("health", {"node": self.cfg.name, "state": self.state,
                                    "counters": {**self.counters, **self.stack.counters},
                                    "gauges": gauges})

    # -- events -----------------------------------------------------------------------
    def _hold(self, state: str, now: int) -> None:
        if self.state == "run":  # counts transitions from tracking to holding
            self.counters["holds"] += 1
        self.stack.hold(now)
        self.state = state

    def _on_command(self, cmd: str, now: int) -> None:
        self.counters["commands"] += 1
        if cmd == "safe_hold":
            self._hold("safe_hold", now)
        elif cmd == "clear" and self.state == "safe_hold":
            self.state = "hold"  # stays holding until the next fresh chunk
        elif cmd == "stop":
            self._hold("stopped", now)

    def _reject(self, why: str) -> None:
        self.counters[why] += 1

    def _on_waypoint(self, env: Envelope, now: int) -> None:
        b, c = env.body, self.counters
        capture = env.stamps.get("capture")
        if b["tokenizer"] != self.tokenizer_hash:
            return self._reject("rejected_hash")
        if capture is None or self.watchdog.from_future(capture, now):
            return self._reject("rejected_bad")
        if self.watchdog.too_old(capture, now):
            return self._late(env, capture)
        if b["count"] > len(self._got) or b["period_ns"] > self.cfg.max_period_ns:
            return self._reject("rejected_bad")
        try:
            wp = self.tok.decode(b["tokens"])
        except WireError:
            return self._reject("rejected_bad")
        if b["values"].shape != wp.shape or np.any(np.abs(b["values"] - wp) > self._tol):
            return self._reject("rejected_bad")
        if self.state in ("safe_hold", "stopped"):
            return self._reject("rejected_hold")
        # capture is in the key: a restarted policy may reuse cycle numbers
        key, i = (env.src, b["cycle"], capture), b["index"]
        if key != self._key:
            if self._key is not None and capture < self._capture_ns:
                return self._reject("rejected_stale")  # older than the chunk in use
            self._key, self._capture_ns, self._period_ns = key, capture, b["period_ns"]
            self._count, self._applied, self._stamps = b["count"], 0, env.stamps
            self._got[:] = False
            self.watchdog.feed(now)
            c["chunks_accepted"] += 1
        elif (b["count"], b["period_ns"]) != (self._count, self._period_ns) or self._got[i]:
            return self._reject("rejected_bad")  # inconsistent with its cycle, or a repeat
        self._wps[i], self._got[i] = wp, True
        c["waypoints_accepted"] += 1
        n = self._applied
        while n < self._count and self._got[n]:
            n += 1
        if n > self._applied:
            if self._applied == 0:  # the cycle's first setpoint goes out this tick
                self._apply_pending = True
            self._applied = n
            self.stack.set_chunk(self._wps[:n], self._capture_ns, self._period_ns, now,
                                 complete=n == self._count)
            self.state = "run"

    def _late(self, env: Envelope, capture: int) -> None:
        """Reject a waypoint past the deadline; report its cycle once as missed (not while
        held on command: nothing is applied then, late or not)."""
        self._reject("rejected_stale")
        if self.state in ("safe_hold", "stopped"):
            return
        self.counters["late_waypoints"] += 1
        key = (env.src, env.body["cycle"], capture)
        if key == self._late_key:
            return
        self._late_key = key
        self._emit({"node": self.cfg.name, "cycle": int(key[1]), "stamps": dict(env.stamps),
                    "fields": {"late_index": float(env.body["index"])}})

    def _emit(self, rec: dict) -> None:
        if self.trace is not None:
            self.trace.write(rec)
        self.pub.publish("trace", rec)

    def _record_apply(self, apply_ns: int) -> None:
        self._apply_pending = False
        e2e = apply_ns - self._capture_ns
        self.e2e.record(e2e)
        self.e2e_last_ns, self.e2e_max_ns = e2e, max(self.e2e_max_ns, e2e)
        stamps = {**self._stamps, "apply": apply_ns}
        self._emit({"node": self.cfg.name, "cycle": int(self._key[1]), "stamps": stamps,
                    "fields": {"e2e_ms": e2e / 1e6}})
