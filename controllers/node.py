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

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.model.obs_spec import FORMAT as OBS_SPEC_FORMAT
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.model.obs_tokens import ObsError, ObsTokens
from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.deadline import DEADLINE_NS
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.rate import RateKeeper
from rtinfer.transport.wire import Envelope, WireError
from rtinfer.transport.wire import now_ns as clock_ns

from .assembler import ChunkAssembler
from .config import ControlConfig
from .hardware import DriverError, HardwareFault, HardwareInterface, Observation, RobotState
from .one_source import OneSource
from .rtc import REST, Commitments, RtcConfig
from .stack import ControlStack
from .watchdog import Watchdog

COUNTERS = ("ticks", "late_ticks", "chunks_accepted", "waypoints_accepted", "rejected_stale",
            "late_waypoints", "late_applies", "rejected_bad", "rejected_hash", "rejected_dest",
            "rejected_hold", "holds", "commands", "read_faults", "write_faults", "obs_sent",
            "obs_dropped", "obs_bad", "late_handovers", "chunks_other_source", "source_switches",
            "committed_sent", "chunks_conditioned", "prefix_mismatch", "obs_held_rtc")
CLAMPS = ("waypoint_clamps", "workspace_clamps")  # the policy asked past the axes: said
BUS_DROPS = ("rejected", "oversize", "dropped_for_age")  # the Subscriber's, as sub.<name>
LATE = "late"          # _check's verdict for a waypoint past the deadline (counted rejected_stale)
# Rejections that mean no chunk from that policy will ever be followed: one line a second.
LOUD = {
    "rejected_hash": lambda self, env: (
        f"chunk from {env.src} rejected: its spec {env.body['spec']} is not this robot's ("
        + ((f"tokenizer {self.tokenizer_hash}" if self.tokenizer_hash else
            "no tokenizer: this robot follows continuous chunks only") if "tokens" in env.body
           else f"action spec {self.action_hash}" if self.action_hash else
           "no action spec: this robot follows action-token chunks only")
        + "); serve a policy packaged for this robot (rtinfer check-model --robot-spec)"),
    "prefix_mismatch": lambda self, env: (
        f"chunk {env.body['cycle']} from {env.src} not applied: it was conditioned on waypoints "
        f"{env.body['conditioned']['from']}.. of chunk {env.body['conditioned']['chunk']}, which "
        f"this robot is not executing (it tracks chunk "
        f"{self.chunk.cycle if self.chunk.key else None}, state {self.state}); chunks that "
        f"arrive out of order do this now and then; if every one does, the node conditions on "
        f"something this robot did not send: run one rtinfer release on both ends"),
    "rejected_dest": lambda self, env: (
        f"chunk from {env.src} rejected: it is for robot {env.body['dest']!r}, this is "
        f"{self.robot!r}, and none for this robot came from it for a second; give each robot "
        f"its own name and each policy its own robot (or see the policy's log: a node serving "
        f"several robots says there when it refuses one)"),
}
DEST_GRACE_NS = 1_000_000_000  # another robot's chunks only, this long: a misconfiguration
FAULTS = (HardwareFault, OSError)  # a failed transfer; any other exception is a bug


@dataclass
class ControllerConfig:
    """control: the robot (controllers.config). tokenizer: the action-token policy's, whose
    chunks this robot follows; action: the continuous-chunk policy's action spec. At least
    one; each is checked against the robot's axes here (names, units, ranges): a policy that
    does not fit is a ValueError naming both sides, before the first tick."""
    control: ControlConfig
    tokenizer: TokenizerConfig | None = None
    name: str = "controller"
    deadline_ns: int = DEADLINE_NS
    chunk_interval_ns: int = 0           # expected time between fresh chunks (policy period);
    # set it whenever the deadline is shorter than that period, or the watchdog holds the
    # robot between every two chunks
    health_hz: float = 10.0
    max_msgs_per_tick: int = 32          # bounds update()'s work under a flood
    max_period_ns: int = 1_000_000_000   # a waypoint period (or start) longer than this is bogus
    action: ActionSpec | None = None     # the robot's action spec: continuous chunks must carry
    # its hash; None: only action-token chunks (on `tokenizer`) are followed
    obs: ObsSpec | ObsTokens | None = None  # the policy's observation spec: an observation
    # that does not match it is not sent (obs_bad); None: sent unchecked
    rtc: RtcConfig | None = None         # real-time chunking: send the committed prefix
    # with each observation (controllers.rtc); None: send none (chunks conditioned on a
    # prefix are still checked against the plan in use)
    clock_uncertainty_ns: int = 0        # how far a chunk's capture may lie in this robot's
    # future: 0 when the robot stamps its own observations (rtinfer's robots do); the clock
    # estimate's uncertainty when another host's clock stamps them

    def __post_init__(self) -> None:
        """Refuse settings the loop cannot run with: ValueError naming each and its fix."""
        rules = (
            (bool(self.name), "name is empty", "give the node a name (it labels health, trace)"),
            (self.deadline_ns > 0, f"deadline_ns={self.deadline_ns} must be > 0",
             "the most a chunk's capture may lag its arrival, e.g. 100_000_000 (100 ms)"),
            (self.chunk_interval_ns >= 0, f"chunk_interval_ns={self.chunk_interval_ns} must be "
             ">= 0", "the policy's period in ns, e.g. 50_000_000 at 20 Hz, or 0"),
            (self.health_hz > 0, f"health_hz={self.health_hz} must be > 0",
             "health messages per second, e.g. 10"),
            (self.max_msgs_per_tick >= 1, f"max_msgs_per_tick={self.max_msgs_per_tick} must be "
             ">= 1", "the messages one tick may take, e.g. 32"),
            (self.max_period_ns > 0, f"max_period_ns={self.max_period_ns} must be > 0",
             "the longest plausible waypoint period, e.g. 1_000_000_000 (1 s)"),
            (0 <= self.clock_uncertainty_ns < self.deadline_ns, f"clock_uncertainty_ns="
             f"{self.clock_uncertainty_ns} must be >= 0 and below the deadline",
             "0 on one host, else the clock offset estimate's uncertainty, e.g. 2_000_000"),
        )
        a, t = self.action, self.tokenizer
        if a is None and t is None:
            rules += ((False, "no policy spec", "give the tokenizer (action-token policies) "
                       "or the action spec (continuous-chunk policies) this robot follows"),)
        if a is not None and t is not None and (a.names, a.horizon) != (t.names, t.horizon):
            rules += ((False, f"action spec names {list(a.names)} / horizon {a.horizon} differ "
                       f"from the tokenizer's {list(t.names)} / {t.horizon}",
                       "describe the same axes and chunk length in both"),)
        c = self.control
        misfit = ([] if t is None else c.spec_problems(t.names, None, t.low, t.high,
                                                       "the policy's tokenizer")) + \
            ([] if a is None else c.spec_problems(a.names, a.units, a.low, a.high,
                                                  "the policy's action spec"))
        rules += tuple((False, m, "serve a policy made for this robot, or fix the robot "
                        "config") for m in dict.fromkeys(misfit))
        wrong = [f"{what}: {fix}" for ok, what, fix in rules if not ok]
        if wrong:
            raise ValueError(f"controller config {self.name!r}: " + "; ".join(wrong))

    @classmethod
    def from_dict(cls, d: dict) -> ControllerConfig:
        """From YAML data: "control" is a robot (controllers.config.ControlConfig.from_dict);
        "tokenizer", "action" and "obs" are dicts or paths of saved files."""
        d = dict(d)
        if "control" not in d:
            raise ValueError("controller config: `control` (the robot's axes) is missing")
        tok, act, obs = d.pop("tokenizer", None), d.pop("action", None), d.pop("obs", None)
        d["rtc"] = RtcConfig.from_dict(d.pop("rtc", None))
        tok = TokenizerConfig.load(tok) if isinstance(tok, str) else \
            None if tok is None else TokenizerConfig.from_dict(tok)
        act = ActionSpec.load(act) if isinstance(act, str) else \
            None if act is None else ActionSpec.from_dict(act)
        obs = obs_spec_from(json.loads(Path(obs).read_text()) if isinstance(obs, str) else obs)
        return cls(tokenizer=tok, control=ControlConfig.from_dict(d.pop("control")),
                   action=act, obs=obs, **d)


def obs_spec_from(doc: dict | None) -> ObsSpec | ObsTokens | None:
    """The observation spec in a policy's obs_spec.json or obs_tokens.json document."""
    if doc is None:
        return None
    return ObsSpec(doc) if doc.get("format") == OBS_SPEC_FORMAT else ObsTokens(doc)


class State(StrEnum):
    """The controller's state (a str: health carries its value)."""
    IDLE = "idle"            # no chunk yet
    RUN = "run"              # tracking a chunk
    HOLD = "hold"            # braked: the watchdog, a late chunk; the next fresh chunk resumes
    SAFE_HOLD = "safe_hold"  # held on command until `clear`
    FAULT = "fault"          # a read or write failed; holds until both succeed again
    STOPPED = "stopped"      # the loop ends after this tick


IDLE, RUN, HOLD, SAFE_HOLD, FAULT, STOPPED = State  # plain names: a State.X lookup is ~50 ns
HELD = (SAFE_HOLD, STOPPED, FAULT)  # nothing applied


@dataclass(slots=True)
class Pending:
    """A new chunk whose first setpoint this tick commits (stamped "apply" when written).
    before: the state before it was taken, which a chunk dropped at commit returns to."""
    before: State


class ObsCheck:
    """Is an `obs` body what the policy's observation spec names? Checked in full (an
    obs_tokens.json spec tokenizes it: ~90 us) for each new layout of keys, dtypes and
    shapes; a body laid out as the last one that passed is taken as it is (~3 us)."""

    def __init__(self, spec: ObsSpec | ObsTokens | None):
        self.spec, self._passed = spec, None

    def problem(self, body: dict) -> str | None:
        """None, or what is wrong (the spec's own words)."""
        if self.spec is None:
            return None
        layout = (tuple((k, getattr(v, "dtype", None), getattr(v, "shape", None))
                        for k, v in body["values"].items()), tuple(body["ints"]),
                  tuple((k, getattr(f["image"], "dtype", None), getattr(f["image"], "shape", None))
                        for k, f in body.get("frames", {}).items()))
        if layout == self._passed:
            return None
        try:
            if isinstance(self.spec, ObsSpec):
                self.spec.feeds(body)
            elif "frames" in body:
                return "an action-token policy takes no camera frames; leave them out"
            else:
                self.spec.encode(body)
        except ObsError as e:
            return str(e)
        self._passed = layout
        return None


class PolicySources:
    """The policies (by src) that sent chunks for this robot, and since when the others
    have sent only other robots' chunks (a misconfiguration after DEST_GRACE_NS)."""

    def __init__(self):
        self._served_by: set[str] = set()  # policies whose chunks this robot followed
        self._others_since: dict[str, int] = {}  # policy -> its first chunk for another robot

    def followed(self, src: str) -> None:
        self._served_by.add(src)

    def only_others(self, src: str, now: int) -> bool:
        """Policy `src` has sent only other robots' chunks, for DEST_GRACE_NS or longer."""
        if src in self._served_by:
            return False
        return now - self._others_since.setdefault(src, now) >= DEST_GRACE_NS


class ControllerNode:
    def __init__(self, hw: HardwareInterface, cfg: ControllerConfig, sub, pub,
                 tokenizer_hash: str | None = None, *, clock: Callable[[], int] = clock_ns,
                 trace=None, robot: str | None = None,
                 on_tick: Callable[[RobotState, int], None] | None = None,
                 one_source: bool = False):
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
        if tokenizer_hash is not None and (cfg.tokenizer is None
                                           or tokenizer_hash != cfg.tokenizer.hash):
            mine = "none" if cfg.tokenizer is None else cfg.tokenizer.hash
            raise ValueError(f"tokenizer hash {tokenizer_hash} does not match the node's "
                             f"tokenizer config ({mine}): ship them together")
        self.hw, self.cfg, self.sub, self.pub, self.trace, self.on_tick = \
            hw, cfg, sub, pub, trace, on_tick
        self.clock = clock
        self.robot = pub.src if robot is None else robot
        self.tok = None if cfg.tokenizer is None else ActionTokenizer(cfg.tokenizer)
        self.stack = ControlStack(cfg.control, gravity=getattr(hw, "gravity", None))
        self.watchdog = Watchdog(cfg.deadline_ns, cfg.chunk_interval_ns,
                                 cfg.clock_uncertainty_ns)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.state = IDLE
        self.pending: Pending | None = None  # a new chunk's first setpoint goes out this tick
        self.last_state: RobotState | None = None  # the last good read
        self.e2e = LatencyHistogram()  # apply - capture per cycle, ns
        self.e2e_last_ns = self.e2e_max_ns = 0
        spec = cfg.action if cfg.action is not None else cfg.tokenizer
        self.chunk = ChunkAssembler(spec.horizon, len(spec.names))
        self.rtc = Commitments(cfg.rtc or RtcConfig(), spec.horizon, len(spec.names),
                               getattr(cfg.action, "max_committed", None))
        # waypoint 0's due time and the period of the policy's chunks (a rest prefix's)
        self._chunk_timing = (cfg.action.start_ns, cfg.action.period_ns) if cfg.action \
            else (cfg.tokenizer.period_ns, cfg.tokenizer.period_ns)
        self._hold_wp = np.zeros(len(spec.names))  # a robot at rest: where it holds
        self._observe = getattr(hw, "observe", None)
        self._on_chunk = getattr(hw, "on_chunk", None)
        self._on_hold = getattr(hw, "on_hold", None)
        self._committed = None  # the key of the chunk committed and not yet handed to on_chunk
        self._obs_check = ObsCheck(cfg.obs)
        self._stop_asked = False  # stop() was called: the loop ends after this tick, whatever else
        self._late_key = None  # the last cycle reported late (once per cycle)
        self._next_health_ns = 0
        # values vs decoded tokens (float32 slack)
        self._tol = None if self.tok is None else self.tok.bin_width / 2 + 1e-6
        self.complaints = Complaints(cfg.name)  # a chunk that can never be followed: say so
        self._clamps = dict.fromkeys(CLAMPS, 0)  # the limits' counts when last said
        self.policies = PolicySources()  # which policies sent chunks for this robot
        # two nodes serving this robot at once (a fleet partition): one node's chunks at a time
        self.source = OneSource(self.watchdog.quiet_ns, self.counters) if one_source else None

    @property
    def tokenizer_hash(self) -> str | None:
        """The hash action-token chunks must carry (None: this robot follows none)."""
        return None if self.cfg.tokenizer is None else self.cfg.tokenizer.hash

    @property
    def action_hash(self) -> str | None:
        """The hash continuous chunks must carry (None: this robot follows none)."""
        return None if self.cfg.action is None else self.cfg.action.hash

    def _bug(self, method: str, error: Exception) -> DriverError:
        return DriverError(f"{type(self.hw).__name__}.{method}", error)

    # -- the loop ---------------------------------------------------------------------
    def tick(self) -> None:
        """One iteration: messages -> read -> observe -> commit -> compute -> write -> trace.
        Raises DriverError when a driver method raises anything but HardwareFault/OSError."""
        now = self.clock()
        self.update(now)
        state = self._read(now)
        if state is not None:
            if self._observe is not None:
                self._observe_step(state, now)
            commit_ns = None if self.pending is None else self._commit()
            if self._write(self.stack.compute(state, now), now):
                if self.state == FAULT:
                    self.state = HOLD  # the robot answers again; the next fresh chunk resumes
                if commit_ns is not None:
                    self._record_apply(commit_ns)
        if self.on_tick is not None and self.last_state is not None:
            self.on_tick(self.last_state, now)
        self.publish(now)
        self.counters["ticks"] += 1
        if self._stop_asked:  # a stop() that landed mid-tick (a signal, another thread) sticks
            self.state = STOPPED

    def _commit(self) -> int | None:
        """The clock when the pending chunk's first setpoint is about to be computed (its
        "apply" stamp). If its capture is older than the deadline by then (the tick's own
        work, the messages, read() and observe(), carried it past), None: the chunk is
        dropped, counted late_applies, reported as a late cycle (late_index 0), and the
        robot holds (counted in holds when it was tracking)."""
        p, commit_ns, chunk = self.pending, self.clock(), self.chunk
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
            state = self.last_state = self.hw.read()
            return state
        except FAULTS:
            self.counters["read_faults"] += 1
            self._fault(now)
            cmd = self.stack.safe_command(self.last_state, now)
            if cmd is not None:
                self._write(cmd, now)
            return None
        except Exception as e:  # a bug in the driver: the loop ends, naming it
            raise self._bug("read", e) from e

    def _observe_step(self, state: RobotState, now: int) -> None:
        """The driver's observation, if it has one this tick, published as `obs`."""
        try:
            obs = self._observe(state, now)
        except Exception as e:  # observe() touches no bus: any exception is a driver bug
            raise self._bug("observe", e) from e
        if obs is not None:
            self.send_obs(obs)

    def send_obs(self, obs: Observation) -> bool:
        """Publish `obs` as an `obs` message stamped capture; counted obs_sent, obs_dropped
        (the bus refused it) or obs_bad (not what the policy's observation spec names: said
        on stderr at most once a second, and not sent). True if sent. With cfg.rtc, it
        carries the committed prefix, and is held back (obs_held_rtc) while the one before
        awaits its chunk (controllers.rtc: one in flight)."""
        capture = int(obs.capture_ns)
        committed = None
        if self.cfg.rtc is not None:
            if self.rtc.awaiting(capture):
                self.counters["obs_held_rtc"] += 1
                return False
            if self.state == RUN:
                committed = self.rtc.prefix(self.chunk, True, capture)
            elif (hold := self._at_rest()) is not None:
                committed = self.rtc.rest_prefix(hold, capture, *self._chunk_timing)
        body = {"values": obs.values, "ints": obs.ints}
        why = None
        if obs.frames:  # each image goes as it is: out of band from 64 KiB (docs/wire.md)
            try:
                body["frames"] = {name: {"image": image, "capture_ns": int(capture_ns)}
                                  for name, (image, capture_ns) in obs.frames.items()}
            except (TypeError, ValueError):
                why = "frames must map a camera name to (uint8 image [H, W, C], capture ns)"
        why = why or self._obs_check.problem(body)
        if committed is not None:  # after the check: the policy's spec names no such key
            body["committed"] = committed
        if why is not None:
            self.counters["obs_bad"] += 1
            self.complaints.say("obs_bad", lambda: f"observation not sent: {why}; make the "
                                "driver's observe() return what the policy's spec names")
            return False
        try:
            sent = self.pub.publish("obs", body, {"capture": capture})
        except WireError as e:  # not a valid obs body (a NaN, a list for an array): nothing sent
            self.counters["obs_bad"] += 1
            wrong = str(e)
            fix = "each camera's frame as a uint8 numpy image [H, W, C] in frames" \
                if "body.frames" in wrong else "finite numpy arrays in values and ints in ints"
            self.complaints.say("obs_bad", lambda: f"observation not sent: not a valid obs "
                                f"body ({wrong}); make the driver's observe() return {fix}")
            return False
        self.counters["obs_sent" if sent else "obs_dropped"] += 1
        if sent and self.cfg.rtc is not None:  # its answer is awaited: one in flight
            until = capture + self.cfg.deadline_ns
            if committed is not None:
                self.counters["committed_sent"] += 1
                until = max(until, committed["start_ns"] + len(committed["values"]) *
                            self._chunk_timing[1])  # the policy's period (none held at rest)
            self.rtc.sent(capture, until)
        return sent


    def _write(self, cmd, now: int) -> bool:
        return self._out("write", self.hw.write, cmd, now=now)

    def _out(self, method: str, call, *args, now: int) -> bool:
        """A driver call that sends to the robot: a HardwareFault is a write fault (counted;
        the robot holds), any other exception a DriverError."""
        try:
            call(*args)
            return True
        except FAULTS:
            self.counters["write_faults"] += 1
            self._fault(now)
            return False
        except Exception as e:
            raise self._bug(method, e) from e

    def _fault(self, now: int) -> None:
        if self.state != STOPPED:
            self._hold(FAULT if self.state != SAFE_HOLD else SAFE_HOLD,
                       now)

    def health_counters(self) -> dict[str, int]:
        """The controller's counters, the limits' and the bus's (sub.* and pub.*: messages
        the sockets dropped before the controller saw them, docs/robots.md section 6)."""
        sub, pub = getattr(self.sub, "counters", {}), getattr(self.pub, "counters", {})
        bus = {f"sub.{k}": sub.get(k, 0) for k in BUS_DROPS}
        bus["sub.sessions_ended"] = getattr(self.sub, "sessions_ended", 0)
        bus["pub.dropped"] = pub.get("dropped", 0)
        return {**self.counters, **self.stack.counters, **bus}

    def publish(self, now: int) -> None:
        if now < self._next_health_ns:
            return
        self._next_health_ns = now + int(1e9 / self.cfg.health_hz)
        self._say_clamps()
        gauges = {"e2e_last_ms": self.e2e_last_ns / 1e6, "e2e_max_ms": self.e2e_max_ns / 1e6,
                  "holding": float(self.stack.holding)}
        self.pub.publish("health", {"node": self.cfg.name, "state": str(self.state),
                                    "counters": self.health_counters(), "gauges": gauges})

    def _say_clamps(self) -> None:
        """The limits clipped the policy's waypoints or cut the command at a workspace bound
        since the last health: one line (at most once a second), with the totals."""
        c, seen = self.stack.counters, self._clamps
        if all(c[k] == seen[k] for k in CLAMPS):
            return
        seen.update((k, c[k]) for k in CLAMPS)
        self.complaints.say("clamps", lambda: (
            f"the policy's chunks go past the axis limits: {seen['waypoint_clamps']} waypoint "
            f"values clipped into [low + margin, high - margin], {seen['workspace_clamps']} "
            f"commands cut back at a workspace bound so far (clipped, never sent as is); "
            f"serve a policy whose action spec fits this robot, or check its output"))

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
        self._committed = None  # a chunk completing after the hold is not handed on
        if self._on_hold is not None:
            self._out("on_hold", self._on_hold, now, now=now)

    def _hand_over(self, now: int) -> None:
        """on_chunk(waypoints, due_ns, now_ns), once per chunk: when it is complete and
        committed, and still fresh (else it is not handed over and the robot holds)."""
        chunk = self.chunk
        if self._on_chunk is None or self._committed != chunk.key or not chunk.complete:
            return
        self._committed = None
        check_ns = self.clock()  # its last waypoint may have come a while after the commit
        if self.watchdog.stale(chunk.capture_ns, check_ns, chunk.window_ns):
            self.counters["late_handovers"] += 1
            self._hold(HOLD, now)
            return
        due_ns = chunk.capture_ns + chunk.start_ns + \
            np.arange(chunk.count, dtype=np.int64) * chunk.period_ns
        self._out("on_chunk", self._on_chunk, self.stack.limited(chunk.waypoints[:chunk.count]),
                  due_ns, check_ns, now=now)

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
        if self.source is not None and env.body["dest"] == self.robot \
                and not self.source.take(env.src, now):
            return  # another node's, while the one followed serves this robot: counted
        self.rtc.answered(env.stamps.get("capture"))
        why, wp = self._check(env, now)
        b = env.body
        if why is None and "conditioned" in b and self._joins(env) is False:
            why = "prefix_mismatch"
        if why is None:
            why = self.chunk.add(env.src, b["cycle"], env.stamps["capture"], b["index"],
                                 b["count"], b["period_ns"], wp, env.stamps, b["start_ns"],
                                 self.rtc.window_ns(b))
        if why is None:
            if "conditioned" in b and self.chunk.received == 1:
                self.counters["chunks_conditioned"] += 1
            self.policies.followed(env.src)
            self._apply(now)
        elif why == LATE:
            self._late(env)
        else:
            self.counters[why] += 1
            # A policy that also serves this robot sends the others' chunks on the same
            # socket (one node, several robots): counted, but that is no misconfiguration.
            if why in LOUD and (why != "rejected_dest" or self.policies.only_others(env.src, now)):
                self.complaints.say(why, lambda: LOUD[why](self, env))

    def _joins(self, env: Envelope) -> bool | None:
        """For a waypoint of a conditioned chunk not yet in use: whether the prefix it names
        is what this robot executes (controllers.rtc); None for the chunk in use, or one
        captured before it (the assembler rejects that as stale)."""
        capture = env.stamps["capture"]
        if (env.src, env.body["cycle"], capture) == self.chunk.key \
                or (self.chunk.key is not None and capture < self.chunk.capture_ns):
            return None
        named = env.body["conditioned"]
        return self.rtc.joins(self.chunk, self.state == RUN, named, capture,
                              self._at_rest() if named["chunk"] == REST else None)

    def _at_rest(self) -> np.ndarray | None:
        """Idle, or holding and stopped: the waypoint it holds (its reference, then the tool
        as commanded; a buffer reused), which it commits to with a rest prefix. None while
        it tracks a chunk, brakes, is held on command, or before its first tick."""
        tr = self.stack.tracker
        if self.state not in (IDLE, HOLD) or tr.t_ns is None or not tr.braking or tr.vel.any():
            return None
        w, n = self._hold_wp, self.stack.n
        w[:n] = tr.pos
        if len(w) > n:
            w[n] = tr.tool
        return w

    def _check(self, env: Envelope, now: int) -> tuple[str | None, np.ndarray | None]:
        """(None, the decoded waypoint) if the message may join a chunk, else (the reason
        not to, None): a rejected_* counter, or LATE."""
        b, capture = env.body, env.stamps.get("capture")
        if b["dest"] != self.robot:
            return "rejected_dest", None
        tokens = b.get("tokens")
        if b["spec"] != (self.tokenizer_hash if tokens is not None else self.action_hash):
            return "rejected_hash", None
        # `now` is the tick's start: a message stamped after it and drained later in the tick
        # (a preempted tick on a busy host) is not from the future; the clock read again is
        if capture is None or (self.watchdog.from_future(capture, now)
                               and self.watchdog.from_future(capture, self.clock())):
            return "rejected_bad", None
        if self.watchdog.stale(capture, now, self.rtc.window_ns(b)):
            return LATE, None
        if b["count"] > self.chunk.horizon or b["period_ns"] > self.cfg.max_period_ns \
                or b["start_ns"] > self.cfg.max_period_ns:
            return "rejected_bad", None
        if tokens is None:  # a continuous chunk: its values are the truth
            wp = b["values"]
            if wp.shape != (self.chunk.waypoints.shape[1],):
                return "rejected_bad", None
        else:
            try:
                wp = self.tok.decode(tokens)
            except WireError:
                return "rejected_bad", None
            if b["values"].shape != wp.shape or np.any(np.abs(b["values"] - wp) > self._tol):
                return "rejected_bad", None  # tokens are the truth: the values must agree
        if self.state in HELD:
            return "rejected_hold", None
        return None, wp

    def _apply(self, now: int) -> None:
        """A waypoint joined the chunk: a new chunk feeds the watchdog; a longer ready
        prefix goes to the tracker (from waypoint 0 on, before the rest arrive)."""
        chunk, c = self.chunk, self.counters
        if chunk.received == 1:  # the first waypoint of a new chunk: a fresh one
            self.watchdog.feed(now)
            c["chunks_accepted"] += 1
        c["waypoints_accepted"] += 1
        if chunk.ready == chunk.applied:
            return  # it arrived past a gap: nothing new to track yet
        if chunk.applied == 0 and self.pending is None:  # its first setpoint goes out this tick
            self.pending = Pending(self.state)
        chunk.applied = chunk.ready
        self.stack.set_chunk(chunk.waypoints[:chunk.ready], chunk.capture_ns, chunk.period_ns,
                             now, complete=chunk.complete, start_ns=chunk.start_ns)
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
        if key != self._late_key:
            self._report_late(key, env.stamps, env.body["index"])

    def _report_late(self, key: tuple, stamps: dict, index: int) -> None:
        """The `trace` of a late cycle (key: src, cycle, capture), reported once: stamps up to
        "recv", no "apply", fields.late_index = the waypoint found late."""
        self._late_key = key
        if "recv" in stamps:  # it took at least this long: the delay the robot commits by
            self.rtc.delay.record(stamps["recv"] - key[2])
        self._emit({"node": self.cfg.name, "cycle": int(key[1]), "stamps": dict(stamps),
                    "fields": {"late_index": float(index)}})

    def _emit(self, rec: dict) -> None:
        if self.trace is not None:
            self.trace.write(rec)
        self.pub.publish("trace", rec)

    def _record_apply(self, apply_ns: int) -> None:
        self.pending = None
        chunk = self.chunk
        e2e = apply_ns - chunk.capture_ns
        self.e2e.record(e2e)
        self.rtc.delay.record(e2e)
        self.e2e_last_ns, self.e2e_max_ns = e2e, max(self.e2e_max_ns, e2e)
        stamps = {**chunk.stamps, "apply": apply_ns}
        fields = {"e2e_ms": e2e / 1e6}
        if chunk.window_ns:  # fresh this long by its committed prefix (the monitor's rule)
            fields["window_ms"] = chunk.window_ns / 1e6
        self._emit({"node": self.cfg.name, "cycle": int(chunk.cycle), "stamps": stamps,
                    "fields": fields})
        self._committed = chunk.key
        self._hand_over(apply_ns)
