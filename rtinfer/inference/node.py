"""The inference node: obs in, streamed action waypoints out, under a compute budget.

    python -m rtinfer.inference.node --model DIR --obs ipc:///tmp/obs --actions ipc:///tmp/act \
        [--curve-secret K.key_secret --curve-map curve.json]     # CURVE on tcp endpoints

One policy object of either kind (rtinfer.inference.policy; docs/policies.md) serves one
robot or several (each an obs `src`, on one or more --obs endpoints; rtinfer.inference.robots:
per robot its newest observation, previous chunk, budget level, clock, counters, admission).
Each spin, as openpilot's controlsd: take the observations that arrived -> pick the robot
due first (earliest deadline first) with those batched beside it where the policy batches
-> encode each into a Cycle -> run the policy, which streams one `action_chunk` per waypoint
the moment it is final to the robot whose obs it answers -> account (counters, histograms,
slack -> budget, trace). One robot is a batch of one (docs/architecture.md draws it).
Its parts: ObservationIntake (obs, identity, robots file), ControlIntake (`budget`/`command`
in, heartbeats), WaypointPublisher (a chunk not finite is not sent: the robot holds, and
BROKEN_AFTER in a row are reported), NodeHealth (counters, histograms, `health` at health_hz).
Stamps: the obs's (capture, ...) + obs_recv, first_token, publish; a trace record per cycle.
A bad obs is counted and dropped (obs_bad; a camera frame's also under its reason: frame_bad,
frame_missing, frame_unknown). Single-threaded; `spin_once` blocks up to timeout_ms; every
time is read from clock= (the monotonic clock by default).

Own slack = deadline - (last publish - capture), capture on this node's clock (the last
waypoint: a chunk is on time only when its last waypoint is). On one host (ipc/inproc/
loopback) the clocks are one; across hosts the robot's clock offset is bracketed by its
`obs` and its `trace` records of this node's waypoint 0 (PeerClock); until both have been
seen the slack is unknown, counted (slack_unknown) and not acted on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np

from rtinfer.inference.budget import Budget
from rtinfer.inference.committed_intake import REFUSED, CommittedIntake
from rtinfer.inference.control_intake import ControlIntake
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.cycle_profile import WARM_UP, profile
from rtinfer.inference.node_config import InferenceNodeConfig, arguments, config
from rtinfer.inference.node_health import BROKEN_AFTER, NodeHealth
from rtinfer.inference.obs_intake import ObservationIntake
from rtinfer.inference.policy import load_policy
from rtinfer.inference.robots import Robots, RobotSlot
from rtinfer.inference.waypoint_publisher import WaypointPublisher
from rtinfer.model.directory import ModelError
from rtinfer.model.obs_spec import FrameError
from rtinfer.realtime.complaints import Complaints, say
from rtinfer.realtime.deadline import deadline_ns
from rtinfer.realtime.node_state import State
from rtinfer.realtime.spin import serve, spin
from rtinfer.realtime.trace import TraceWriter
from rtinfer.transport.action_chunk import carried_stamps
from rtinfer.transport.bus import EndpointInUse, Publisher
from rtinfer.transport.curve import curve_from_args, read_curve_map
from rtinfer.transport.identity import Identity
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import WireError, now_ns

__all__ = ["BROKEN_AFTER", "InferenceNode", "InferenceNodeConfig", "main"]


class InferenceNode:
    def __init__(
        self,
        model_dir,
        obs_endpoint: str | Sequence[str],
        action_endpoint: str,
        *,
        control_endpoint: str | None = None,
        cfg: InferenceNodeConfig | None = None,
        backend_opts: dict | None = None,
        ctx=None,
        curve=None,
        robots_file: str | None = None,
        clock: Callable[[], int] = now_ns,
    ):
        """obs_endpoint: the robots' obs endpoint(s). curve: bus ``curve=`` for every socket
        (keys.curve_configs: per endpoint; it must name the endpoints robots_file may list).
        robots_file: robots learned at run time (rtinfer.inference.robots_file). clock: the
        node's monotonic ns clock (every stamp, deadline and timer of the node reads it)."""
        self.cfg = cfg = cfg or InferenceNodeConfig()
        self.clock = clock
        obs_eps = [obs_endpoint] if isinstance(obs_endpoint, str) else list(obs_endpoint)
        # before any socket: a refused --batch must leave nothing open behind the error
        endpoints = max(len(obs_eps), 2) if robots_file else len(obs_eps)
        self.policy = p = load_policy(model_dir, cfg, backend_opts, endpoints, clock=clock)
        budget = Budget(p.levels, deadline_ns(cfg.deadline_ms), auto=cfg.auto_budget)
        self.intake = self.control = self.out = self.trace = None  # close(): those opened
        self.complaints = Complaints(cfg.name)  # every line the node says, rate-limited
        say = self.complaints.say
        try:  # a socket that fails (an endpoint in use, a bad key) closes those before it
            # with CURVE a robot is its key: an obs whose src is not its key's name is refused
            self.intake = ObservationIntake(
                obs_eps,
                Identity.of(curve, action_endpoint, say),
                ctx=ctx,
                curve=curve,
                say=say,
                robots_file=robots_file,
                clock=clock,
            )
            self.robots = Robots(
                budget,
                remote=self.intake.remote,
                max_robots=cfg.max_robots,
                period_ns=p.period_ns,
                start_ns=p.start_ns,
                say=say,
            )
            self.out = WaypointPublisher(
                Publisher(action_endpoint, cfg.name, ctx=ctx, curve=curve),
                p,
                self.robots,
                address=cfg.address_chunks,
                clock=clock,
                say=say,
            )
            self.control = ControlIntake(
                control_endpoint,
                self.out.pub,
                cfg.name,
                cfg.health_hz,
                ctx=ctx,
                curve=curve,
                say=say,
                clock=clock,
            )
            if len(p.batches) > 1:  # the latency table admission plans with at first
                self.robots.set_batches(p.batches)
                times = self._profile(p.sample_inputs(), p.batches, 3)
                self.robots.set_profile({b: int(np.median(t)) for b, t in times.items()})
                p.clear_figures()
            if len(p.levels) > 1:  # what each budget level costs until its cycles are timed
                self.robots.cost_model.set_level_profile(
                    {
                        i: int(np.median(self._profile(p.sample_inputs(), [1], 3, lv)[1]))
                        for i, lv in enumerate(p.levels)
                    }
                )
                p.clear_figures()
            self.trace = TraceWriter(cfg.trace_path) if cfg.trace_path else None
        except BaseException:
            self.close()
            raise
        self.health_part = NodeHealth(cfg.name, cfg.health_hz)
        self.committed = CommittedIntake(p, say)  # robots' committed prefixes (RTC)
        self.state = State.RUN  # HOLD (a safe_hold command), STOPPED (a stop command, stop())

    @property
    def budget(self) -> Budget:
        """The first robot's budget (each later robot's starts as its copy)."""
        return self.robots.first_budget

    @property
    def running(self) -> bool:
        return self.state != State.STOPPED

    @property
    def slack_ns(self) -> int | None:
        """The last answered cycle's own slack (a gauge)."""
        return self.robots.slack_ns

    @property
    def robot_clock(self) -> PeerClock | None:
        return self.robots.first_clock

    @property
    def counters(self) -> dict[str, int]:
        """The node's counters (a copy: its parts own them)."""
        return {**self.health_part.counters, **self.out.counters}

    def run(self, seconds: float | None = None) -> None:
        """Spin until a `stop` command, stop(), or `seconds` elapse."""
        spin(self, seconds, 50)

    def stop(self) -> None:
        self.state = State.STOPPED

    # --- one cycle: take -> pick -> encode -> run -> account --------------------------------
    def spin_once(self, timeout_ms: int = 50) -> bool:
        """Handle control messages, take the observations that arrived, and answer the robot
        whose chunk is due first (with the robots batched beside it, where the policy
        batches). True if any was answered."""
        self._housekeeping()
        self._take_observations(timeout_ms)
        slots = self.robots.next_batch(self.budget.deadline_ns, self.clock(), self.policy.max_batch)
        jobs = [job for job in map(self._encode, slots) if job is not None]
        if not jobs:
            return False
        t_start = self.clock()
        outs = self.policy.run([(cycle, inputs) for _, cycle, inputs in jobs], self.out.publish)
        self._account(jobs, outs, t_start, self.clock())
        return True

    def _encode(self, slot: RobotSlot) -> tuple | None:
        """(slot, its Cycle, the policy's inputs) for the slot's waiting observation, or None
        (held, or an observation that does not fit the model: counted, said)."""
        env, slot.waiting = slot.waiting, None
        counters = self.health_part.counters
        if self.state == State.HOLD:
            counters["obs_held"] += 1
            return None
        try:
            inputs = self.policy.encode(env.body)
        except WireError as e:
            counters["obs_bad"] += 1
            slot.counters["obs_bad"] += 1
            kind = e.kind if isinstance(e, FrameError) else "obs_bad"
            if kind != "obs_bad":  # a frame's problem, also under its reason
                counters[kind] += 1
            why = str(e)
            self.complaints.say(
                kind,
                lambda: (
                    f"observation {env.seq} from {env.src} "
                    f"does not fit the model, not answered: {why}"
                ),
            )
            return None
        committed = self.committed.take(env)
        if committed is REFUSED:
            return None
        t_recv = env.stamps.get("recv", self.clock())
        if slot.clock is not None and "publish" in env.stamps:
            slot.clock.from_peer(env.stamps["publish"], t_recv)
        level = slot.level  # the schedule's choice for this cycle
        return (
            slot,
            Cycle(
                env.seq,
                carried_stamps(env.stamps, t_recv),
                env.stamps.get("capture"),
                level,
                level.chunk,
                env.src,
                slot.previous,
                committed=committed,
            ),
            inputs,
        )

    def _account(self, jobs: list, outs: list, t_start: int, t_end: int) -> None:
        """The answered cycles into the counters, histograms, slack, budgets and trace; each
        robot keeps its cycle's chunk as its previous."""
        health = self.health_part
        health.record_compute(t_end - t_start)
        if health.counters["cycles"] >= WARM_UP:  # a session's first runs are slow
            self.robots.record_cost(
                self.policy.batch_for(len(jobs)), jobs[0][0].level_index, t_end - t_start
            )
        for (slot, cycle, _), out in zip(jobs, outs):
            slot.previous = cycle.previous
            if health.record(
                cycle.stamps["obs_recv"], cycle.first_token_ns, t_end, len(out), cycle.dropped
            ):
                self.complaints.say(
                    "policy_broken",
                    lambda: (
                        f"the policy is broken: its last "
                        f"{health.counters['chunks_not_finite_in_a_row']} chunks had NaN or inf "
                        f"values, none was sent; check the model "
                        f"(rtinfer check-model {self.policy.model.path})"
                    ),
                )
            com = cycle.committed
            self.robots.answered(
                slot,
                cycle.capture,
                cycle.last_publish_ns,
                window_ns=0 if com is None or not com.used else self.committed.window_of(com.n),
            )
            if self.trace is not None:
                self.trace.write(
                    cycle.record(
                        self.cfg.name,
                        t_end,
                        len(out),
                        slot.level_index,
                        slot.counters["obs_superseded"],
                    )
                )

    # --- robots joining -----------------------------------------------------------------------
    def _take_observations(self, timeout_ms: int) -> None:
        """Everything queued, into the robots' slots; waits up to timeout_ms only while no
        robot has an observation waiting."""
        waiting = any(s.waiting is not None for s in self.robots.slots.values())
        self.intake.take(0 if waiting else timeout_ms, self._offer)

    def _offer(self, env) -> None:
        robots = self.robots
        if env.src not in robots.slots and robots.slots and not robots.cost.count:
            try:  # a second robot joins before any cycle was timed: time this observation's
                for t in self._profile(self.policy.encode(env.body), [1], 5)[1]:
                    robots.cost.record(t)
            except WireError:
                pass  # counted when it is answered
        deadline = self.budget.deadline_ns  # or later: until a committed prefix runs out
        robots.offer(env, self.clock(), max(deadline, self.committed.window_ns(env.body)))

    def _profile(self, inputs, sizes: list[int], rounds: int, level=None) -> dict:
        """cycle_profile.profile at `level` (default: full quality)."""
        return profile(
            self.policy, self.clock, inputs, sizes, rounds, level or self.budget.levels[0]
        )

    # --- control, heartbeat, health -----------------------------------------------------
    def _housekeeping(self) -> None:
        self.health_part.counters["robots_released"] += self.intake.follow_robots_file(
            self.clock(), self.robots
        )
        level, cmd = self.control.poll()
        if level is not None and self.cfg.auto_budget:  # a fixed-budget node ignores it too
            for b in {self.budget, *(s.budget for s in self.robots.slots.values())}:
                b.set_monitor_level(level)
        if cmd == "stop":
            self.stop()
        elif cmd is not None and self.running:  # a stop sticks
            self.state = State.HOLD if cmd == "safe_hold" else State.RUN
        self.intake.take_traces(self.robots)
        now = self.clock()
        if self.health_part.due(now):
            self.robots.leave_idle(now)
            self.robots.check_load(self.budget.deadline_ns)
            self.control.beat(now)
            self.out.pub.publish("health", self.health())

    def health(self) -> dict:
        """`health` body: counters (node, policy, robots, subscriber) and latency gauges (us)."""
        robots, gauges = self.robots.figures()
        return self.health_part.body(
            self.state,
            {
                **self.out.counters,
                **self.policy.figures(),
                **robots,
                **self.intake.counters(),
                **self.committed.counters,
                "keys_revoked": self.out.pub.revocations,
                "budget_level": self.budget.index,
                "budget_switches": self.budget.switches,
            },
            gauges,
        )

    def close(self) -> None:
        for part in (self.intake, self.control, self.out and self.out.pub, self.trace):
            if part is not None:
                part.close()


def main(argv: list[str] | None = None) -> int:
    p = arguments(__doc__.split("\n")[0])
    a = p.parse_args(argv)
    # a robots file may name any obs endpoint the curve map lists
    listed = (
        [ep for ep in read_curve_map(a.curve_map) if ep != a.actions]
        if a.robots_file and a.curve_map
        else []
    )
    curve = curve_from_args(p, a, binds=[a.actions], connects=[*a.obs, a.control, *listed])
    cfg = config(p, a)
    try:
        node = InferenceNode(
            a.model,
            a.obs,
            a.actions,
            control_endpoint=a.control,
            cfg=cfg,
            curve=curve,
            robots_file=a.robots_file,
            backend_opts={"precision": a.precision} if a.precision else None,
        )
    except (ModelError, EndpointInUse) as e:  # BackendError too: one line with the fix
        say(cfg.name, str(e))
        return 2
    if a.level is not None:
        try:
            node.budget.fix(a.level)
        except ValueError as e:
            node.close()
            p.error(f"--level {a.level}: {e}")
    serve(node, a.seconds, f"{cfg.name}: ready ({node.policy.summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
