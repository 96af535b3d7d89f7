"""RobotProcess: a HardwareInterface behind a ControllerNode, with its sockets, heartbeats,
trace and report (what controllers.run runs; callers in Python build one directly)."""

from __future__ import annotations

import time

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.realtime.complaints import say
from rtinfer.realtime.deadline import DEADLINE_MS, deadline_ns
from rtinfer.realtime.os_setup import realtime_gc
from rtinfer.realtime.spin import on_signals
from rtinfer.realtime.trace import TraceWriter
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.heartbeat import HeartbeatResponder

from .config import ControlConfig
from .controller_config import ControllerConfig
from .hardware import DriverError
from .node import RUN, STOPPED, ControllerNode
from .rtc import RtcConfig

PING_EVERY = 10  # ticks between polls of the monitor's heartbeat pings
HW_HEALTH_NS = 500_000_000  # a simulator's own health: twice a second
# With a monitor (a control endpoint), the loop starts once the monitor subscribes to this
# robot's traces, at most MONITOR_WAIT_S after start: PUB/SUB drops what is sent before a
# subscription lands, so the monitor would miss the first cycles. Only the monitor
# subscribes to a robot's heartbeat echoes; its trace subscription comes with them.
MONITOR_TOPICS = ("heartbeat", "trace")
MONITOR_WAIT_S = 3.0
FORGET_EVERY = 1000  # ticks between reads of the subscriptions libzmq queued for us


class RobotProcess:
    """A HardwareInterface behind a ControllerNode, with its sockets, heartbeats and trace.
    Not thread-safe: run() from one thread; stop() may come from a signal handler."""

    def __init__(
        self,
        hw,
        control: ControlConfig,
        *,
        robot: str,
        obs: str,
        actions: str | list[str],
        control_endpoint: str | None = None,
        tokenizer: TokenizerConfig | None = None,
        action: ActionSpec | None = None,
        name: str = "controller",
        deadline_ms: float = DEADLINE_MS,
        policy_hz: float = 20.0,
        trace_path: str | None = None,
        curve=None,
        addressed: bool = False,
        obs_spec=None,
        rtc: RtcConfig | None = None,
        open_loop_ms: float | None = None,
    ):
        """robot: the src of this robot's messages (its chunks carry it as dest). name: the
        controller's node name (health, trace). tokenizer / action: the policy's spec (at
        least one); obs_spec: its observation spec (ObsSpec or ObsTokens; None: the driver's
        observations go out unchecked). curve: the bus ``curve=`` for every socket.
        addressed: take only the chunks addressed to this robot (a policy node run with
        --address-chunks): libzmq filters the other robots' chunks at the node. rtc: send
        the committed prefix with each observation (real-time chunking, controllers.rtc).
        open_loop_ms: take a node's asks under overload (controllers.pace)."""
        cfg = ControllerConfig(
            control,
            tokenizer=tokenizer,
            action=action,
            obs=obs_spec,
            name=name,
            deadline_ns=deadline_ns(deadline_ms),
            chunk_interval_ns=int(1e9 / policy_hz),
            rtc=rtc,
            open_loop_ms=open_loop_ms,
        )  # checked first
        self.hw, self.robot = hw, robot
        self.pub = Publisher(obs, robot, bind=True, curve=curve, listeners=bool(control_endpoint))
        # The policy binds its actions endpoint; the monitor binds the control endpoint.
        self.sub = Subscriber(
            ([actions] if isinstance(actions, str) else [*actions])
            + ([control_endpoint] if control_endpoint else []),
            ["action_chunk", "command"],
            curve=curve,
            to={"action_chunk": robot} if addressed else None,
        )
        # Round-trip echoes for the monitor's clock-offset estimate go out on the obs PUB.
        self.pings = (
            Subscriber(control_endpoint, ["heartbeat"], curve=curve) if control_endpoint else None
        )
        self.hb = HeartbeatResponder(self.pub, name)
        self.trace = TraceWriter(trace_path) if trace_path else None
        self._advance = getattr(hw, "advance", None)
        self._hw_health = getattr(hw, "health", None)
        self._next_hw_health_ns = 0
        self._on_hold = getattr(hw, "on_hold", None)
        self._tracking = False  # the controller was following a chunk at its last tick
        self.signalled = False  # stopped by SIGTERM/SIGINT
        self.driver_error: DriverError | None = None  # the driver bug that ended the run
        self.node = ControllerNode(
            hw, cfg, self.sub, self.pub, trace=self.trace, on_tick=self._on_tick, one_source=True
        )

    def _on_tick(self, state, now_ns: int) -> None:
        """After the controller's tick: a simulator's step, its health, heartbeats."""
        node = self.node
        self._tracking = node.state == RUN
        if self._advance is not None and self._driver(
            "advance", self._advance, now_ns, node.counters["chunks_accepted"] > 0
        ):
            node.stop()  # the simulator's episode is over: the loop ends after this tick
        if self._hw_health is not None and now_ns >= self._next_hw_health_ns:
            self._next_hw_health_ns = now_ns + HW_HEALTH_NS
            self._publish_hw_health("run")
        if self.pings is not None and node.counters["ticks"] % PING_EVERY == 0:
            self.hb.poll(self.pings)
        self.hb.beat(now_ns)
        if node.counters["ticks"] % FORGET_EVERY == 0:
            self.pub.forget_listeners()

    def _wait_for_monitor(self) -> None:
        """Until the monitor listens (at most MONITOR_WAIT_S; one line if it never came), or
        until stopped."""
        if self.pings is None:
            return
        end = time.monotonic() + MONITOR_WAIT_S
        while self.node.state != STOPPED:
            if self.pub.heard(MONITOR_TOPICS, 0.05):
                return
            if time.monotonic() > end:
                say(
                    self.node.cfg.name,
                    f"no monitor subscribed to {self.pub.endpoint} within {MONITOR_WAIT_S:g} s; "
                    "running without waiting for it (it misses the cycles before it connects)",
                    error=False,
                )
                return

    def _driver(self, method: str, call, *args):
        try:
            return call(*args)
        except Exception as e:  # a bug in the driver: the run ends, naming it
            raise DriverError(f"{type(self.hw).__name__}.{method}", e) from e

    def _publish_hw_health(self, state: str) -> None:
        body = self._driver("health", self._hw_health, self.robot, state)
        if body is not None:
            self.pub.publish("health", body)

    def run(self, seconds: float | None = None) -> dict:
        """The loop, with the GC frozen, until `seconds` (None: until stopped); the report.
        A driver bug ends the loop early: `driver_error`, and the report up to it."""
        try:
            self._wait_for_monitor()
            with realtime_gc():
                self.node.run(seconds)
            if self._tracking and self._on_hold is not None:  # stopped while following a
                self.node.counters["holds"] += 1  # chunk: the robot holds
                self._driver("on_hold", self._on_hold, self.node.clock())
            if self._hw_health is not None:
                self._publish_hw_health("stopped")  # the dashboard's last counts: the report's
        except DriverError as e:
            self.driver_error = e
        return self.report()

    def stop(self) -> None:
        """End the loop after the current tick (safe from a signal handler)."""
        self.node.stop()

    def report(self) -> dict:
        """controller, stack (the limits), bus (what the sockets dropped), e2e_ms, and the
        hardware's report(); with `driver_error` (one line) when a driver bug ended the run."""
        node = self.node
        e2e = node.reports.e2e.percentiles_us()
        bus = {k: v for k, v in node.health_counters().items() if k.startswith(("sub.", "pub."))}
        out = {
            "controller": dict(node.counters),
            "stack": dict(node.stack.counters),
            "bus": bus,
            "e2e_ms": {k: (v / 1e3 if k != "count" else v) for k, v in e2e.items()},
        }
        if self.driver_error is not None:
            out["driver_error"] = str(self.driver_error)
        extra = getattr(self.hw, "report", None)
        try:
            return {**out, **(extra() if extra is not None else {})}
        except Exception:
            if self.driver_error is None:
                raise
            return out  # a broken driver's own report: the run's counters matter more

    def close(self) -> None:
        for c in (self.trace, self.pub, self.sub, self.pings):
            if c is not None:
                c.close()
        closer = getattr(self.hw, "close", None)
        if closer is not None:
            closer()

    def run_until_signalled(self, seconds: float | None = None) -> dict:
        """run(), stopping cleanly on SIGTERM/SIGINT; closes everything; the report."""

        def on_signal(_signum):
            self.signalled = True
            self.stop()

        try:
            with on_signals(on_signal):
                return self.run(seconds)
        finally:
            self.close()
