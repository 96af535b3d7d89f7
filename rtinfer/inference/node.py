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
A chunk with a value that is not finite (a broken policy's NaN or inf) is not sent: counted
(chunks_not_finite), said in one rate-limited line, the robot holds as without a chunk, and
the node serves on; BROKEN_AFTER in a row are reported (health policy_broken, a line).
Stamps: the obs's (capture, ...) + obs_recv, first_token, publish. Also: `budget`/`command`
in, `heartbeat` and `health` out at `health_hz`, a trace record per cycle. A bad obs is
counted and dropped (one that does not fit the policy's observation spec: obs_bad, and a
camera frame's problem also under its reason: frame_bad, frame_missing, frame_unknown).
Single-threaded; `spin_once` blocks up to timeout_ms.

Own slack = deadline - (last publish - capture), capture on this node's clock (the last
waypoint: a chunk is on time only when its last waypoint is). On one host (ipc/inproc/
loopback) the clocks are one; across hosts the robot's clock offset is bracketed by its
`obs` and its `trace` records of this node's waypoint 0 (PeerClock); until both have been
seen the slack is unknown, counted (slack_unknown) and not acted on.
"""
from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from rtinfer.inference.budget import Budget
from rtinfer.inference.committed_intake import REFUSED, CommittedIntake
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.node_config import InferenceNodeConfig, arguments, config
from rtinfer.inference.policy import load_policy
from rtinfer.inference.robots import Robots, RobotSlot
from rtinfer.inference.robots_file import RobotsFile
from rtinfer.model.directory import ModelError
from rtinfer.model.obs_spec import FRAME_COUNTERS, FrameError
from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.spin import serve, spin
from rtinfer.realtime.trace import TraceWriter
from rtinfer.transport.action_chunk import carried_stamps, waypoint_body
from rtinfer.transport.bus import EndpointInUse, Publisher, Subscriber
from rtinfer.transport.curve import curve_from_args, read_curve_map
from rtinfer.transport.heartbeat import HeartbeatResponder, same_host
from rtinfer.transport.identity import Identity
from rtinfer.transport.peer_clock import PeerClock
from rtinfer.transport.wire import WireError, now_ns

__all__ = ["InferenceNode", "InferenceNodeConfig", "main"]

DRAIN_LIMIT = 256  # messages one spin takes off a socket: bounds its work under a flood
WARM_UP = 3       # cycles not timed for admission (allocations and caches of the first runs)
BROKEN_AFTER = 10  # cycles in a row whose chunk was not finite: the policy is broken


class InferenceNode:
    def __init__(self, model_dir, obs_endpoint: str | Sequence[str], action_endpoint: str, *,
                 control_endpoint: str | None = None, cfg: InferenceNodeConfig | None = None,
                 backend_opts: dict | None = None, ctx=None, curve=None,
                 robots_file: str | None = None):
        """obs_endpoint: the robots' obs endpoint(s). curve: bus ``curve=`` for every socket
        (keys.curve_configs: per endpoint; it must name the endpoints robots_file may list).
        robots_file: robots learned at run time (rtinfer.inference.robots_file)."""
        self.cfg = cfg = cfg or InferenceNodeConfig()
        obs_eps = [obs_endpoint] if isinstance(obs_endpoint, str) else list(obs_endpoint)
        # before any socket: a refused --batch must leave nothing open behind the error
        self.policy = p = load_policy(model_dir, cfg, backend_opts,
                                      max(len(obs_eps), 2) if robots_file else len(obs_eps))
        budget = Budget(p.levels, int(cfg.deadline_ms * 1e6), auto=cfg.auto_budget)
        self.obs_sub = self.ctl_sub = self.trace_sub = self.pub = self.trace = None
        self._obs_counts: dict[str, int] = {}  # of the obs subscribers a robots file replaced
        self.complaints = Complaints(cfg.name)  # every line the node says, rate-limited
        say = self.complaints.say
        try:  # a socket that fails (an endpoint in use, a bad key) closes those before it
            self._ctx, self._curve, self._static_obs = ctx, curve, obs_eps
            self.robots_file = RobotsFile(robots_file, say) if robots_file else None
            self._subscribe(obs_eps)
            self.ctl_sub = Subscriber(control_endpoint, ["budget", "command", "heartbeat"],
                                      ctx=ctx, curve=curve, say=say) if control_endpoint else None
            self.robots = Robots(budget, remote=self._remote, max_robots=cfg.max_robots,
                                 period_ns=p.period_ns, say=say)
            if len(p.batches) > 1:  # the latency table admission plans with at first
                self.robots.set_batches(p.batches)
                times = self._profile(p.sample_inputs(), p.batches, 3)
                self.robots.set_profile({b: int(np.median(t)) for b, t in times.items()})
                p.clear_figures()
            if len(p.levels) > 1:  # what each budget level costs until its cycles are timed
                self.robots.cost_model.set_level_profile({i: int(np.median(
                    self._profile(p.sample_inputs(), [1], 3, lv)[1]))
                    for i, lv in enumerate(p.levels)})
                p.clear_figures()
            self.pub = Publisher(action_endpoint, cfg.name, ctx=ctx, curve=curve)
            self.heartbeat = HeartbeatResponder(self.pub, cfg.name, period_s=1.0 / cfg.health_hz)
            self.trace = TraceWriter(cfg.trace_path) if cfg.trace_path else None
        except BaseException:
            self.close()
            raise
        self.hist = {k: LatencyHistogram() for k in ("ttft", "per_token", "cycle", "compute")}
        self.counters = dict.fromkeys(("cycles", "obs_bad", *FRAME_COUNTERS, "obs_held",
                                       "waypoints", "publish_dropped", "chunks_not_finite",
                                       "chunks_not_finite_in_a_row", "robots_released"), 0)
        self.committed = CommittedIntake(p, say)  # robots' committed prefixes (RTC)
        self.state = "run"  # "hold" (a safe_hold command), "stop" (a stop command, stop())
        # with CURVE a robot is its key: an obs whose src is not its key's name is refused
        self.identity = Identity.of(curve, action_endpoint, say)
        self._next_health = 0

    @property
    def budget(self) -> Budget:
        """The first robot's budget (each later robot's starts as its copy)."""
        return self.robots.first_budget

    @property
    def running(self) -> bool:
        return self.state != "stop"

    @property
    def slack_ns(self) -> int | None:
        """The last answered cycle's own slack (a gauge)."""
        return self.robots.slack_ns

    @property
    def robot_clock(self) -> PeerClock | None:
        return self.robots.first_clock

    def run(self, seconds: float | None = None) -> None:
        """Spin until a `stop` command, stop(), or `seconds` elapse."""
        spin(self, seconds, 50)

    def stop(self) -> None:
        self.state = "stop"

    # --- one cycle: take -> pick -> encode -> run -> account --------------------------------
    def spin_once(self, timeout_ms: int = 50) -> bool:
        """Handle control messages, take the observations that arrived, and answer the robot
        whose chunk is due first (with the robots batched beside it, where the policy
        batches). True if any was answered."""
        self._housekeeping()
        self._take_observations(timeout_ms)
        slots = self.robots.next_batch(self.budget.deadline_ns, now_ns(), self.policy.max_batch)
        jobs = [job for job in map(self._encode, slots) if job is not None]
        if not jobs:
            return False
        t_start = now_ns()
        outs = self.policy.run([(cycle, inputs) for _, cycle, inputs in jobs], self._publish)
        self._account(jobs, outs, t_start, now_ns())
        return True

    def _encode(self, slot: RobotSlot) -> tuple | None:
        """(slot, its Cycle, the policy's inputs) for the slot's waiting observation, or None
        (held, or an observation that does not fit the model: counted, said)."""
        env, slot.waiting = slot.waiting, None
        if self.state == "hold":
            self.counters["obs_held"] += 1
            return None
        try:
            inputs = self.policy.encode(env.body)
        except WireError as e:
            self.counters["obs_bad"] += 1
            slot.counters["obs_bad"] += 1
            kind = e.kind if isinstance(e, FrameError) else "obs_bad"
            if kind != "obs_bad":  # a frame's problem, also under its reason
                self.counters[kind] += 1
            why = str(e)
            self.complaints.say(kind, lambda: f"observation {env.seq} from {env.src} "
                                              f"does not fit the model, not answered: {why}")
            return None
        committed = self.committed.take(env)
        if committed is REFUSED:
            return None
        t_recv = env.stamps.get("recv", now_ns())
        if slot.clock is not None and "publish" in env.stamps:
            slot.clock.from_peer(env.stamps["publish"], t_recv)
        level = slot.level  # the schedule's choice for this cycle
        return slot, Cycle(env.seq, carried_stamps(env.stamps, t_recv), env.stamps.get("capture"),
                           level, level.chunk, env.src, slot.previous,
                           committed=committed), inputs

    def _publish(self, cycle: Cycle, first: int, values: np.ndarray, tokens) -> None:
        """Waypoints first.. of cycle's chunk (values (n, D), tokens (n, D) or None), one
        action_chunk message each. Values that are not finite drop the chunk from there on
        (a policy's NaN must not reach a robot, nor kill the node for all of them)."""
        if cycle.dropped or not np.isfinite(values).all():
            if not cycle.dropped:
                cycle.dropped = True
                self.counters["chunks_not_finite"] += 1
                self.complaints.say("chunk_not_finite", lambda: (
                    f"the policy's chunk for observation {cycle.seq} from {cycle.dest} has NaN "
                    f"or inf values: not sent, the robot holds"))
            return
        to = cycle.dest if self.cfg.address_chunks else None
        named = cycle.committed.conditioned() if cycle.committed is not None \
            and cycle.committed.used else None
        for j in range(len(values)):
            st = dict(cycle.stamps)
            st["first_token"] = cycle.first_token_ns
            st["publish"] = cycle.last_publish_ns = now_ns()
            if cycle.first_publish_ns is None:
                cycle.first_publish_ns = st["publish"]
                slot = self.robots.slots.get(cycle.dest)
                if slot is not None:
                    slot.sent_ns.append(st["publish"])
            body = waypoint_body(cycle.seq, first + j, cycle.count, values[j],
                                 spec=self.policy.spec_hash, period_ns=self.policy.period_ns,
                                 start_ns=self.policy.start_ns, dest=cycle.dest,
                                 tokens=None if tokens is None else tokens[j],
                                 conditioned=named)
            if not self.pub.publish("action_chunk", body, st, to=to):
                self.counters["publish_dropped"] += 1
            self.counters["waypoints"] += 1

    def _account(self, jobs: list, outs: list, t_start: int, t_end: int) -> None:
        """The answered cycles into the counters, histograms, slack, budgets and trace; each
        robot keeps its cycle's chunk as its previous."""
        self.hist["compute"].record(t_end - t_start)
        if self.counters["cycles"] >= WARM_UP:  # a session's first runs are slow
            self.robots.record_cost(self.policy.batch_for(len(jobs)), jobs[0][0].level_index,
                                    t_end - t_start)
        c = self.counters
        for (slot, cycle, _), out in zip(jobs, outs):
            slot.previous = cycle.previous
            t_recv, t_first, n = cycle.stamps["obs_recv"], cycle.first_token_ns, len(out)
            c["cycles"] += 1
            c["chunks_not_finite_in_a_row"] = c["chunks_not_finite_in_a_row"] + 1 \
                if cycle.dropped else 0
            if c["chunks_not_finite_in_a_row"] >= BROKEN_AFTER:
                self.complaints.say("policy_broken", lambda: (
                    f"the policy is broken: its last {c['chunks_not_finite_in_a_row']} chunks "
                    f"had NaN or inf values, none was sent; check the model "
                    f"(rtinfer check-model {self.policy.model.path})"))
            self.hist["ttft"].record(t_first - t_recv)
            self.hist["per_token"].record((t_end - t_first) // max(n - 1, 1))
            self.hist["cycle"].record(t_end - t_recv)
            com = cycle.committed  # not `c`: the counters, for the next job of the batch
            self.robots.answered(slot, cycle.capture, cycle.last_publish_ns, window_ns=0 if com
                                 is None or not com.used else self.committed.window_of(com.n))
            if self.trace is not None:
                self.trace.write(cycle.record(self.cfg.name, t_end, n, slot.level_index,
                                              slot.counters["obs_superseded"]))

    # --- robots joining -----------------------------------------------------------------------
    def _take_observations(self, timeout_ms: int) -> None:
        """Everything queued, into the robots' slots; waits up to timeout_ms only while no
        robot has an observation waiting."""
        waiting = any(s.waiting is not None for s in self.robots.slots.values())
        env = self.obs_sub.recv(0 if waiting else timeout_ms)
        for _ in range(DRAIN_LIMIT):
            if env is None:
                return
            if self.identity.accept(env.src, self.obs_sub.peer):
                self._offer(env)
            env = self.obs_sub.recv(0)

    def _offer(self, env) -> None:
        robots = self.robots
        if env.src not in robots.slots and robots.slots and not robots.cost.count:
            try:  # a second robot joins before any cycle was timed: time this observation's
                for t in self._profile(self.policy.encode(env.body), [1], 5)[1]:
                    robots.cost.record(t)
            except WireError:
                pass  # counted when it is answered
        deadline = self.budget.deadline_ns  # or later: until a committed prefix runs out
        robots.offer(env, now_ns(), max(deadline, self.committed.window_ns(env.body)))

    def _profile(self, inputs, sizes: list[int], rounds: int, level=None
                 ) -> dict[int, list[int]]:
        """Per batch size, `rounds` runs on `inputs` timed (ns) after WARM_UP untimed ones (a
        session's first runs are slow), at `level` (default: full quality), no previous
        chunk, publishing nothing: what admission plans with until real cycles are timed."""
        level, times = level or self.budget.levels[0], {}
        for b in sizes:
            times[b] = []
            for _ in range(WARM_UP + rounds):
                jobs = [(Cycle(0, {}, None, level, level.chunk), inputs) for _ in range(b)]
                t0 = now_ns()
                self.policy.run(jobs)
                times[b].append(now_ns() - t0)
            del times[b][:WARM_UP]
        return times

    def _subscribe(self, obs_eps: list[str]) -> None:
        """The obs (and, robots on other hosts, trace: their clocks are bracketed from obs
        and traces, module doc) subscribers, anew on these endpoints. Latest-only per robot,
        not per topic: the robots' slots keep each one's newest."""
        old = (self.obs_sub, self.trace_sub)
        self._obs_eps = obs_eps
        self._remote = not all(same_host(e) for e in obs_eps)
        self.obs_sub = Subscriber(obs_eps, ["obs"], ctx=self._ctx, curve=self._curve,
                                  say=self.complaints.say)
        self.trace_sub = Subscriber(obs_eps, ["trace"], ctx=self._ctx, curve=self._curve,
                                    say=self.complaints.say) if self._remote else None
        if old[0] is not None:  # its counters live on in health
            for k, v in (*old[0].counters.items(), ("sessions_ended", old[0].sessions_ended)):
                self._obs_counts[k] = self._obs_counts.get(k, 0) + v
        for sub in old:
            if sub is not None:
                sub.close()

    def _follow_robots_file(self, now: int) -> None:
        """The robots file changed: let go of the robots it no longer names (their slots
        freed at once), and subscribe to the obs endpoints it names now. The allow-list is
        read again first, so a key copied in with the file admits its robot at once."""
        before = self.robots_file.robots
        robots = self.robots_file.changed(now)
        if robots is None:
            return
        if self.identity.allow is not None:
            self.identity.allow.refresh()
        for name in [n for n in before if n not in robots]:
            if self.robots.slots.pop(name, None) is not None:
                self.counters["robots_released"] += 1
            self.robots.refused.pop(name, None)
        for name in [n for n in robots if n not in before]:  # placed here (again): its next
            self.robots.refused.pop(name, None)                # observation is checked at once
        eps = list(dict.fromkeys([*self._static_obs, *robots.values()]))
        if eps != self._obs_eps:
            self._subscribe(eps)
            self.robots.remote = self._remote
        self.complaints.say("robots_file_read", f"robots file {self.robots_file.path}: "
                            f"{', '.join(robots) or 'no robots'}", error=False)

    # --- control, heartbeat, health -----------------------------------------------------
    def _housekeeping(self) -> None:
        if self.robots_file is not None:
            self._follow_robots_file(now_ns())
        if self.ctl_sub is not None:
            for topic, env in self.ctl_sub.poll_latest(0).items():
                if topic == "heartbeat":  # the monitor's ping: echo it (clock offsets)
                    self.heartbeat.on_ping(env)
                elif topic == "budget":
                    if self.cfg.auto_budget:  # a fixed-budget node ignores the monitor too
                        for b in {self.budget, *(s.budget for s in self.robots.slots.values())}:
                            b.set_monitor_level(env.body["level"])
                elif env.body["cmd"] == "stop":
                    self.stop()
                elif self.running:  # a stop sticks
                    self.state = "hold" if env.body["cmd"] == "safe_hold" else "run"
        if self.trace_sub is not None:
            for _ in range(DRAIN_LIMIT):
                env = self.trace_sub.recv(0)
                if env is None:
                    break
                if self.identity.accept(env.src, self.trace_sub.peer):
                    self._on_robot_trace(env)
        now = now_ns()
        if now >= self._next_health:
            self._next_health = now + int(1e9 / self.cfg.health_hz)
            self.robots.leave_idle(now)
            self.robots.check_load(self.budget.deadline_ns)
            self.heartbeat.beat(now)
            self.pub.publish("health", self.health())

    def _on_robot_trace(self, env) -> None:
        """A robot's trace of one of our waypoint 0s: a node -> robot message (its publish
        on our clock, its recv on the robot's). Others' traces are ignored."""
        slot = self.robots.slots.get(env.src)
        st = env.body["stamps"]
        if slot is not None and "recv" in st and st.get("publish") in slot.sent_ns:
            slot.clock.to_peer(st["publish"], st["recv"])

    def health(self) -> dict:
        """`health` body: counters (node, policy, robots, subscriber) and latency gauges (us)."""
        robots, gauges = self.robots.figures()
        old = self._obs_counts
        c = {**self.counters, **self.policy.figures(), **robots,
             "policy_broken": int(self.counters["chunks_not_finite_in_a_row"] >= BROKEN_AFTER),
             "obs_rejected": self.obs_sub.counters["rejected"] + old.get("rejected", 0),
             "obs_oversize": self.obs_sub.counters["oversize"] + old.get("oversize", 0),
             "obs_sessions_ended": self.obs_sub.sessions_ended + old.get("sessions_ended", 0),
             **self.identity.counters, **self.committed.counters,
             "keys_revoked": self.pub.revocations,
             "budget_level": self.budget.index, "budget_switches": self.budget.switches}
        g = {f"{k}_p{p}_us": float(self.hist[k].percentiles_us()[f"p{p}"])
             for k in self.hist for p in (50, 99)}
        return {"node": self.cfg.name, "state": self.state, "counters": c,
                "gauges": {**g, **gauges}}

    def close(self) -> None:
        for s in (self.obs_sub, self.ctl_sub, self.trace_sub, self.pub, self.trace):
            if s is not None:
                s.close()


def main(argv: list[str] | None = None) -> int:
    p = arguments(__doc__.split("\n")[0])
    a = p.parse_args(argv)
    # a robots file may name any obs endpoint the curve map lists
    listed = [ep for ep in read_curve_map(a.curve_map) if ep != a.actions] \
        if a.robots_file and a.curve_map else []
    curve = curve_from_args(p, a, binds=[a.actions], connects=[*a.obs, a.control, *listed])
    cfg = config(p, a)
    try:
        node = InferenceNode(a.model, a.obs, a.actions, control_endpoint=a.control, cfg=cfg,
                             curve=curve, robots_file=a.robots_file,
                             backend_opts={"precision": a.precision} if a.precision else None)
    except (ModelError, EndpointInUse) as e:  # BackendError too: one line with the fix
        print(f"{cfg.name}: error: {e}", file=sys.stderr, flush=True)
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
