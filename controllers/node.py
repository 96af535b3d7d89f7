"""ControllerNode: the robot-side 1 kHz loop. One tick reads
messages -> read -> observe -> commit -> compute -> write -> trace (then health when due).

Messages (update()): drain action_chunk and command messages without blocking. Each action_chunk
message is one waypoint, taken check -> assemble -> apply: waypoints of a cycle are
assembled as they stream (ChunkAssembler) and the tracker starts on waypoint 0 before
the rest arrive. Both policy kinds of docs/wire.md v2: a waypoint with `tokens` (an action-
token policy) must carry the tokenizer's hash as `spec`; its tokens are the truth, decoded
here, and its `values` must agree with them within half a bin. A waypoint without tokens (a
continuous-chunk policy) must carry the hash of the robot's own ActionSpec (cfg.action):
its values are the truth. Waypoint i is due at capture + start_ns + i * period_ns.
Rejected, and counted per message: addressed to another robot (rejected_dest: `dest` is not
this robot's obs source name), capture older than the deadline or older than the chunk in
use (rejected_stale), a spec hash not this robot's (rejected_hash), bad tokens or
inconsistent fields (rejected_bad), anything while in a commanded safe_hold (rejected_hold),
a chunk conditioned on a committed prefix this robot is not executing (prefix_mismatch;
real-time chunking, controllers.rtc: a conditioned chunk is fresh until its first waypoint
not committed is due, even past the deadline; with cfg.rtc each obs carries the prefix).
A chunk of another spec is also said on stderr at once, then at most once a second
(rtinfer.realtime.complaints). A chunk for another robot is said the same way once its
policy has sent only other robots' chunks for DEST_GRACE_NS: a node serving several robots
sends every robot's chunks on one socket, in any order, so a robot it serves too counts the
others' chunks and says nothing. Local watchdog (on transport.liveliness): no
fresh chunk for a deadline past the expected chunk interval (`chunk_interval_ns`, the
policy's period) -> hold (brake within limits, keep the tool); the next fresh chunk resumes.
A read or write that raises HardwareFault
(or OSError) is counted (read_faults, write_faults): the robot holds (a failed read gets
ControlStack.safe_command from the last good state), the state is "fault" until a tick whose
read and write both succeed, and chunks meanwhile are rejected_hold; the next fresh chunk
after that resumes. Observe: the driver's observe(state, now) returns what the policy is to
see (controllers.hardware.Observation), and the node publishes it as `obs`, camera frames
included (out of band, not copied), checked against the policy's observation spec when it
has one (a mismatch is obs_bad, said, not sent).
Compute, write: ControlStack -> HardwareInterface.write(). Any other exception from a driver
method is a bug: DriverError, naming the method, ends the loop.
A driver that executes trajectories itself (the ROS 2 bridge's trajectory_chunk mode) may
have on_chunk(waypoints, due_ns, now_ns), called once per chunk when it is complete and its
first setpoint has been committed, with the waypoints as the stack tracks them (positions
clipped into the workspace), checked fresh at now_ns: a chunk whose last waypoint came so
late that it is older than the deadline by then is not handed over (late_handovers) and the
robot holds; and on_hold(now_ns), called on every hold from tracking (as often as `holds`
counts). A HardwareFault from either is a write fault.
Trace and health: `health` at health_hz and, per cycle, a `trace` record with an "apply" stamp.
A waypoint that arrives past the deadline is never applied; the first such waypoint of a
cycle also goes out as a `trace` record without "apply" (fields.late_index = its index,
stamps up to "recv"), so the monitor counts the cycle as a deadline miss. A new chunk taken in
time is checked once more when the tick commits its first setpoint (after the messages and
read(), just before the law computes it; that instant is its "apply" stamp): if the tick's
own work carried it past the deadline it is dropped (late_applies, the same late record with
late_index 0) and the robot holds, so no chunk's first setpoint goes out past capture + deadline.
The node's Subscriber must be on ["action_chunk", "command"] and NOT latest_only (that
would drop waypoints). Not thread-safe: run it from one thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rtinfer.realtime.node_state import State
from rtinfer.realtime.rate import RateKeeper
from rtinfer.transport.wire import Envelope
from rtinfer.transport.wire import now_ns as clock_ns

from .chunk_intake import HELD, LATE, LOUD, OTHER_NODE, ChunkIntake
from .controller_config import ControllerConfig, obs_spec_from
from .driver_calls import FAULTS, DriverCalls
from .hardware import HardwareInterface, Observation, RobotState
from .obs_check import ObsCheck
from .observe_step import ObserveStep
from .policy_sources import DEST_GRACE_NS, PolicySources
from .reports import CLAMPS, ControllerReports
from .rest_point import RestPoint
from .rtc import Commitments, RtcConfig
from .stack import ControlStack
from .watchdog import Watchdog

__all__ = [
    "CLAMPS",
    "DEST_GRACE_NS",
    "FAULTS",
    "LOUD",
    "ControllerConfig",
    "ControllerNode",
    "ObsCheck",
    "PolicySources",
    "State",
    "obs_spec_from",
]

COUNTERS = (
    "ticks",
    "late_ticks",
    "chunks_accepted",
    "waypoints_accepted",
    "rejected_stale",
    "late_waypoints",
    "late_applies",
    "rejected_bad",
    "rejected_hash",
    "rejected_dest",
    "rejected_hold",
    "holds",
    "commands",
    "read_faults",
    "write_faults",
    "obs_sent",
    "obs_dropped",
    "obs_bad",
    "late_handovers",
    "chunks_other_source",
    "source_switches",
    "committed_sent",
    "chunks_conditioned",
    "prefix_mismatch",
    "obs_held_rtc",
)
BUS_DROPS = ("rejected", "oversize", "dropped_for_age")  # the Subscriber's, as sub.<name>
IDLE, RUN, HOLD, SAFE_HOLD, FAULT, STOPPED = State  # plain names: a State.X lookup is ~50 ns


@dataclass(slots=True)
class Pending:
    """A new chunk whose first setpoint this tick commits (stamped "apply" when written).
    before: the state before it was taken, which a chunk dropped at commit returns to."""

    before: State


def check_tokenizer_hash(cfg: ControllerConfig, tokenizer_hash: str | None) -> None:
    """ValueError unless tokenizer_hash (None: not given) is cfg.tokenizer's."""
    if tokenizer_hash is not None and (
        cfg.tokenizer is None or tokenizer_hash != cfg.tokenizer.hash
    ):
        mine = "none" if cfg.tokenizer is None else cfg.tokenizer.hash
        raise ValueError(
            f"tokenizer hash {tokenizer_hash} does not match the node's "
            f"tokenizer config ({mine}): ship them together"
        )


class ControllerNode:
    def __init__(
        self,
        hw: HardwareInterface,
        cfg: ControllerConfig,
        sub,
        pub,
        tokenizer_hash: str | None = None,
        *,
        clock: Callable[[], int] = clock_ns,
        trace=None,
        robot: str | None = None,
        on_tick: Callable[[RobotState, int], None] | None = None,
        one_source: bool = False,
    ):
        """sub/pub: rtinfer.transport.bus Subscriber/Publisher (not owned: the caller closes them).
        tokenizer_hash: the hash token chunks must carry; must match cfg.tokenizer. clock: the
        loop's monotonic ns clock, read at the start of each tick and when a tick commits a
        new chunk's first setpoint (tests give their own). robot: the `src` this robot's obs
        go out under, which chunks for it carry as `dest` (default pub.src). trace: an
        optional rtinfer.realtime.trace.TraceWriter. on_tick(state, now_ns): the owner's hook,
        called at the end of every tick once a read has succeeded, with the last good state
        (controllers.run: a simulator's step, heartbeats). one_source: take one node's chunks
        at a time when several serve this robot (controllers.one_source; controllers.run sets
        it, a robot listening to a fleet's nodes); off, a chunk from another src replaces the
        one in use unless older (the conformance vectors' rule, tests/vectors)."""
        check_tokenizer_hash(cfg, tokenizer_hash)
        self.cfg, self.sub, self.pub, self.on_tick, self.clock = cfg, sub, pub, on_tick, clock
        self.driver = DriverCalls(hw)
        self.stack = ControlStack(cfg.control, gravity=getattr(hw, "gravity", None))
        self.watchdog = Watchdog(cfg.deadline_ns, cfg.chunk_interval_ns, cfg.clock_uncertainty_ns)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.state = IDLE
        self.pending: Pending | None = None  # a new chunk's first setpoint goes out this tick
        spec = cfg.action if cfg.action is not None else cfg.tokenizer
        assert spec is not None  # ControllerConfig refuses neither
        declared = getattr(cfg.action, "max_committed", None)
        self.rtc = Commitments(cfg.rtc or RtcConfig(), spec.horizon, len(spec.names), declared)
        rest = RestPoint(self.stack, len(spec.names))
        self.intake = ChunkIntake(
            cfg,
            pub.src if robot is None else robot,
            rtc=self.rtc,
            watchdog=self.watchdog,
            rest=rest,
            clock=clock,
            counters=self.counters,
            one_source=one_source,
        )
        self.observer = ObserveStep(
            cfg, pub, rtc=self.rtc, rest=rest, counters=self.counters, pace=self.intake.pace
        )
        self.reports = ControllerReports(cfg.name, cfg.health_hz, pub, trace)
        self._stop_asked = False  # stop() was called: the loop ends after this tick, whatever else

    @property
    def hw(self) -> HardwareInterface:
        return self.driver.hw

    @property
    def chunk(self):
        """The chunk being assembled and tracked (controllers.assembler)."""
        return self.intake.chunk

    @property
    def robot(self) -> str:
        return self.intake.robot

    @property
    def last_state(self) -> RobotState | None:
        return self.driver.last_state

    # -- the loop ---------------------------------------------------------------------
    def tick(self) -> None:
        """One iteration: messages -> read -> observe -> commit -> compute -> write -> trace.
        Raises DriverError when a driver method raises anything but HardwareFault/OSError."""
        now = self.clock()
        self.update(now)
        state = self._read(now)
        if state is not None:
            obs = self.driver.observe(state, now)
            if obs is not None:
                self.send_obs(obs)
            commit_ns = None if self.pending is None else self._commit()
            if self._write(self.stack.compute(state, now), now):
                if self.state == FAULT:
                    self.state = HOLD  # the robot answers again; the next fresh chunk resumes
                if commit_ns is not None:
                    self._record_apply(commit_ns)
        if self.on_tick is not None and self.driver.last_state is not None:
            self.on_tick(self.driver.last_state, now)
        if self.reports.due(now):
            self.reports.health(self.state, self.health_counters(), self.stack)
        self.counters["ticks"] += 1
        if self._stop_asked:  # a stop() that landed mid-tick (a signal, another thread) sticks
            self.state = STOPPED

    def _commit(self) -> int | None:
        """The clock when the pending chunk's first setpoint is about to be computed (its
        "apply" stamp). If its capture is older than the deadline by then (the tick's own
        work, the messages, read() and observe(), carried it past), None: the chunk is
        dropped, counted late_applies, reported as a late cycle (late_index 0), and the
        robot holds (counted in holds when it was tracking)."""
        p, commit_ns, chunk = self.pending, self.clock(), self.intake.chunk
        assert p is not None and chunk.key is not None
        if not self.watchdog.stale(chunk.capture_ns, commit_ns, chunk.window_ns):
            return commit_ns
        self.pending = None
        self.counters["late_applies"] += 1
        self.stack.hold(commit_ns)
        self.state = HOLD if p.before == RUN else p.before
        if p.before == RUN:
            self._held(commit_ns)
        self._report_late(chunk.key, chunk.stamps, 0)
        return None

    def run(self, seconds: float | None = None) -> None:
        """Tick at control.rate_hz for `seconds` (None: until a `stop` command)."""
        rk = RateKeeper(self.cfg.control.rate_hz, self.cfg.name)
        end = None if seconds is None else self.clock() + int(seconds * 1e9)
        while self.state != STOPPED and (end is None or self.clock() < end):
            self.tick()
            rk.keep_time()
            self.counters["late_ticks"] = rk.late_ticks

    def stop(self) -> None:
        """End the loop after the current tick (a hardware hook may call it, e.g. a simulator
        whose episode is over; safe from a signal handler or another thread: one landing while
        a waypoint is being taken is not undone by it)."""
        self._stop_asked = True
        self.state = STOPPED

    def update(self, now: int) -> None:
        for _ in range(self.cfg.max_msgs_per_tick):
            env = self.sub.recv(timeout_ms=0)
            if env is None:
                break
            if env.topic == "action_chunk":
                self._on_waypoint(env, now)
            elif env.topic == "command":
                self._on_command(env.body["cmd"], now)
        if self.state == RUN and self.watchdog.expired(now):
            self._hold(HOLD, now)

    def _read(self, now: int) -> RobotState | None:
        """The robot's state, or None after a failed read (counted; the robot holds on
        ControlStack.safe_command from the last good state)."""
        try:
            return self.driver.read()
        except FAULTS:
            self.counters["read_faults"] += 1
            self._fault(now)
            cmd = self.stack.safe_command(self.driver.last_state, now)
            if cmd is not None:
                self._write(cmd, now)
            return None

    def send_obs(self, obs: Observation) -> bool:
        """Publish `obs` as an `obs` message (controllers.observe_step); True if sent."""
        return self.observer.send(obs, self.state, self.intake.chunk)

    def _write(self, cmd, now: int) -> bool:
        if self.driver.write(cmd):
            return True
        self.counters["write_faults"] += 1
        self._fault(now)
        return False

    def _out(self, method: str, call, *args, now: int) -> bool:
        """A driver call that sends to the robot: a HardwareFault is a write fault (counted;
        the robot holds), any other exception a DriverError."""
        if self.driver.call(method, call, *args):
            return True
        self.counters["write_faults"] += 1
        self._fault(now)
        return False

    def _fault(self, now: int) -> None:
        if self.state != STOPPED:
            self._hold(FAULT if self.state != SAFE_HOLD else SAFE_HOLD, now)

    def health_counters(self) -> dict[str, int]:
        """The controller's counters, the limits' and the bus's (sub.* and pub.*: messages
        the sockets dropped before the controller saw them, docs/robots.md section 6)."""
        sub, pub = getattr(self.sub, "counters", {}), getattr(self.pub, "counters", {})
        bus = {f"sub.{k}": sub.get(k, 0) for k in BUS_DROPS}
        bus["sub.sessions_ended"] = getattr(self.sub, "sessions_ended", 0)
        bus["pub.dropped"] = pub.get("dropped", 0)
        return {**self.counters, **self.stack.counters, **bus}

    # -- events -----------------------------------------------------------------------
    def _hold(self, state: State, now: int) -> None:
        was_tracking = self.state == RUN  # counts transitions from tracking to holding
        self.pending = None  # a held robot sends no chunk's first setpoint
        self.stack.hold(now)
        self.state = state
        if was_tracking:
            self._held(now)

    def _held(self, now: int) -> None:
        """A hold from tracking: counted, and told to a driver that has on_hold (after the
        state changed, so a fault it raises holds without coming back here)."""
        self.counters["holds"] += 1
        self.driver.committed = None  # a chunk completing after the hold is not handed on
        if self.driver.on_hold is not None:
            self._out("on_hold", self.driver.on_hold, now, now=now)

    def _hand_over(self, now: int) -> None:
        """on_chunk(waypoints, due_ns, now_ns), once per chunk: when it is complete and
        committed, and still fresh (else it is not handed over and the robot holds)."""
        chunk, driver = self.intake.chunk, self.driver
        if driver.on_chunk is None or driver.committed != chunk.key or not chunk.complete:
            return
        driver.committed = None
        check_ns = self.clock()  # its last waypoint may have come a while after the commit
        if self.watchdog.stale(chunk.capture_ns, check_ns, chunk.window_ns):
            self.counters["late_handovers"] += 1
            self._hold(HOLD, now)
            return
        due_ns = (
            chunk.capture_ns
            + chunk.start_ns
            + np.arange(chunk.count, dtype=np.int64) * chunk.period_ns
        )
        self._out(
            "on_chunk",
            driver.on_chunk,
            self.stack.limited(chunk.waypoints[: chunk.count]),
            due_ns,
            check_ns,
            now=now,
        )

    def _on_command(self, cmd: str, now: int) -> None:
        self.counters["commands"] += 1
        if cmd == "safe_hold":
            self._hold(SAFE_HOLD, now)
        elif cmd == "clear" and self.state == SAFE_HOLD:
            self.state = HOLD  # stays holding until the next fresh chunk
        elif cmd == "stop":
            self._hold(STOPPED, now)

    def _on_waypoint(self, env: Envelope, now: int) -> None:
        """check -> assemble -> apply; a waypoint not taken is counted under its reason."""
        why = self.intake.take(env, now, self.state)
        if why is None:
            self._apply(now)
        elif why == LATE:
            self._late(env)
        elif why != OTHER_NODE:  # another node's, while the one followed serves: counted
            self.counters[why] += 1
            self.intake.say(why, env, now, self.state)

    def _apply(self, now: int) -> None:
        """A waypoint joined the chunk: a new chunk feeds the watchdog; a longer ready
        prefix goes to the tracker (from waypoint 0 on, before the rest arrive)."""
        chunk, c = self.intake.chunk, self.counters
        if chunk.received == 1:  # the first waypoint of a new chunk: a fresh one
            self.watchdog.feed(now)
            c["chunks_accepted"] += 1
        c["waypoints_accepted"] += 1
        if chunk.ready == chunk.applied:
            return  # it arrived past a gap: nothing new to track yet
        if chunk.applied == 0 and self.pending is None:  # its first setpoint goes out this tick
            self.pending = Pending(self.state)
        chunk.applied = chunk.ready
        self.stack.set_chunk(
            chunk.waypoints[: chunk.ready],
            chunk.capture_ns,
            chunk.period_ns,
            now,
            complete=chunk.complete,
            start_ns=chunk.start_ns,
        )
        self.state = RUN
        self._hand_over(now)  # the rest of a committed chunk streamed in

    def _late(self, env: Envelope) -> None:
        """Reject a waypoint past the deadline; report its cycle once as missed (not while
        held on command: nothing is applied then, late or not)."""
        self.counters["rejected_stale"] += 1
        if self.state in HELD:
            return
        self.counters["late_waypoints"] += 1
        key = (env.src, env.body["cycle"], env.stamps["capture"])
        if key != self.reports.late_key:
            self._report_late(key, env.stamps, env.body["index"])

    def _report_late(self, key: tuple, stamps: dict, index: int) -> None:
        """A late cycle (key: src, cycle, capture), reported once (ControllerReports.late)."""
        if "recv" in stamps:  # it took at least this long: the delay the robot commits by
            self.rtc.delay.record(stamps["recv"] - key[2])
        self.reports.late(key, stamps, index)

    def _record_apply(self, apply_ns: int) -> None:
        self.pending = None
        chunk = self.intake.chunk
        self.rtc.delay.record(self.reports.applied(chunk, apply_ns))
        self.driver.committed = chunk.key
        self._hand_over(apply_ns)
