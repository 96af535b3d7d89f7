"""The inference node: obs in, streamed action waypoints out, under a compute budget.

    python -m rtinfer.inference.node --model DIR --obs ipc:///tmp/obs --actions ipc:///tmp/act \
        [--curve-secret K.key_secret --curve-map curve.json]     # CURVE on tcp endpoints

It serves a model directory of either kind (docs/policies.md), to one robot or several
(each an obs `src`, on one or more --obs endpoints; rtinfer.inference.robots): per robot its
own newest observation (latest-only per robot; skipped ones counted), previous chunk, budget
level, clock and counters; one cycle at a time, the robot whose chunk is due first (earliest
deadline first), several at once when the model ships batched graphs (models.export_batched:
the robots waiting at the first one's budget level decode together, each row its own drafts,
bit-identical per row; rtinfer.inference.batch); a robot beyond what the measured cycle and
batch times fit is refused when it joins, said once and counted. An action-token policy, each cycle: the observation -> tokens -> prefill (the
instruction prefix stays KV-cached across cycles, re-prefilled only when the instruction
changes) -> decode one chunk (plain or speculative, per budget level) -> one
`action_chunk` message per waypoint the moment its D tokens are final. A continuous-chunk
policy: the observation -> its obs-spec inputs -> the level's graph -> the chunk, then one
`action_chunk` message per waypoint (values only). Each waypoint goes to the robot whose obs
it answers (`dest` = the obs's src). Stamps: the obs's (capture, ...) + obs_recv,
first_token (for a chunk policy: the chunk computed), publish. Also: `budget`/`command` in, `heartbeat`
and `health` out at `health_hz`, a trace record per cycle. A bad obs is counted and
dropped; the loop never dies of one. Single-threaded; `spin_once` blocks up to timeout_ms.

Own slack = deadline - (last publish - capture), capture moved onto this node's clock (the
last waypoint: a chunk is on time only when its last waypoint is).
On one host (ipc/inproc/loopback obs endpoint) the clocks are one. Across hosts the
robot's clock offset is bracketed by its `obs` (robot -> node) and its `trace` records of
this node's waypoint 0 (node -> robot), both read on the obs endpoint (PeerClock); until
both have been seen the slack is unknown, counted (slack_unknown) and not acted on.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rtinfer.inference.batch import BATCH_DRAFTERS, BatchRunner, Row
from rtinfer.inference.budget import Budget, default_levels
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.robots import Robots, RobotSlot
from rtinfer.transport.action_chunk import carried_stamps, waypoint_body
from rtinfer.transport.bus import EndpointInUse, Publisher, Subscriber
from rtinfer.transport.heartbeat import HeartbeatResponder, PeerClock, same_host
from rtinfer.transport.identity import Identity
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.spin import spin, stop_on_signals
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.model.chunk_model import load_model
from rtinfer.model.directory import PRECISIONS, ModelError
from rtinfer.inference.chunk_runner import GraphChunkRunner, chunk_levels
from rtinfer.inference.runner import DRAFTERS, ChunkRunner
from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.trace import TraceWriter
from rtinfer.transport.wire import WireError, now_ns


DRAIN_LIMIT = 256  # messages one spin takes off a socket: bounds its work under a flood
WARM_UP = 3       # cycles not timed for admission (allocations and caches of the first runs)


@dataclass
class InferenceNodeConfig:
    name: str = "infer"
    backend: str = "onnx"
    drafter: str = "chunk"           # one of runner.DRAFTERS
    draft_model: str | None = None   # drafter "model": its directory (default: the model's own)
    sample: bool = False
    temperature: float = 1.0
    prefix_cache: bool = True
    deadline_ms: float = 100.0
    auto_budget: bool = True
    health_hz: float = 1.0
    threads: int = 1
    trace_path: str | None = None
    seed: int = 0
    max_robots: int | None = None    # a cap on the robots served (None: what the cycle time fits)
    batch: int | None = None         # the most robots decoded in one batch (None: with several
                                     # obs endpoints, the largest batch the model ships, where
                                     # batching applies; 1: none)
    address_chunks: bool = False     # each action_chunk in an addressed topic frame for its
                                     # robot (docs/wire.md): libzmq then sends a robot only its
                                     # own chunks; its controllers must take addressed frames

    def __post_init__(self) -> None:
        def need(ok: bool, what: str, fix: str) -> None:
            if not ok:
                raise ValueError(f"InferenceNodeConfig: {what}: {fix}")
        need(bool(self.name), "name is empty", "give the node a name (it is the wire source)")
        need(self.drafter in DRAFTERS, f"drafter {self.drafter!r} is unknown",
             f"use one of {', '.join(DRAFTERS)}")
        need(self.deadline_ms > 0, f"deadline_ms is {self.deadline_ms}", "use a deadline > 0 ms")
        need(self.health_hz > 0, f"health_hz is {self.health_hz}", "use a rate > 0 Hz")
        need(self.threads >= 1, f"threads is {self.threads}", "use at least 1 thread")
        need(self.batch is None or self.batch >= 1, f"batch is {self.batch}",
             "use 1 (no batching) or more, or leave it out (the model's largest batch)")
        need(self.max_robots is None or self.max_robots >= 1,
             f"max_robots is {self.max_robots}", "use at least 1 robot, or leave it out")
        need(self.temperature > 0, f"temperature is {self.temperature}",
             "use a temperature > 0 (1.0: the model's own distribution)")


class InferenceNode:
    def __init__(self, model_dir, obs_endpoint: str | Sequence[str], action_endpoint: str, *,
                 control_endpoint: str | None = None, cfg: InferenceNodeConfig | None = None,
                 backend_opts: dict | None = None, ctx=None, curve=None):
        """obs_endpoint: the robots' obs endpoint(s). curve: bus ``curve=`` for every socket
        (keys.curve_configs: per endpoint)."""
        self.cfg = cfg = cfg or InferenceNodeConfig()
        self.model = md = load_model(model_dir)
        if md.kind == "chunk":  # a continuous-chunk policy: one graph per level
            if cfg.backend != "onnx":
                raise ModelError(f"{md.path}: a continuous-chunk policy runs on ONNX Runtime; "
                                 f"use --backend onnx (not {cfg.backend})")
            self.runner = GraphChunkRunner(md, threads=cfg.threads,
                                           spin=(backend_opts or {}).get("spin"))
            self.decoder, self.drafters, self.tokenizer = None, {}, None
            self.spec_hash, self.period_ns = md.action.hash, md.action.period_ns
            self.start_ns = md.action.start_ns
            levels = chunk_levels(md)
            self._encode, self._run = md.obs.feeds, self.runner.run_cycle
        else:
            opts = {"threads": cfg.threads} if cfg.backend == "onnx" else {}
            self.runner = ChunkRunner(md, backend=cfg.backend,
                                      backend_opts={**opts, **(backend_opts or {})},
                                      drafter=cfg.drafter, prefix_cache=cfg.prefix_cache,
                                      sample=cfg.sample, temperature=cfg.temperature,
                                      seed=cfg.seed, draft_model=cfg.draft_model)
            self.decoder, self.drafters = self.runner.decoder, self.runner.drafters
            self.tokenizer = ActionTokenizer(md.tokenizer)
            self.spec_hash, self.period_ns = md.tokenizer.hash, md.tokenizer.period_ns
            self.start_ns = md.tokenizer.period_ns
            levels = default_levels(md, self.decoder.k_verify, gates=self.runner.backend.gates)
            self._encode = md.obs.encode  # -> (instruction tokens, observation tokens)
            self._run = lambda cycle, x, cb: self.runner.run_cycle(cycle, *x, cb)
        self.budget = Budget(levels, int(cfg.deadline_ms * 1e6), auto=cfg.auto_budget)
        obs_eps = [obs_endpoint] if isinstance(obs_endpoint, str) else list(obs_endpoint)
        # before any socket: a refused --batch must leave nothing open behind the error
        self.batcher = self._batcher(md, backend_opts or {}, len(obs_eps))
        self.obs_sub = self.ctl_sub = self.trace_sub = self.pub = self.trace = None
        try:  # a socket that fails (an endpoint in use, a bad key) closes those before it
            # latest-only per robot, not per topic: the robots' slots keep each one's newest
            self.obs_sub = Subscriber(obs_eps, ["obs"], ctx=ctx, curve=curve)
            self.ctl_sub = Subscriber(control_endpoint, ["budget", "command", "heartbeat"],
                                      ctx=ctx, curve=curve) if control_endpoint else None
            # robots on other hosts: their clocks are bracketed from obs and traces (module doc)
            remote = not all(same_host(e) for e in obs_eps)
            self.trace_sub = Subscriber(obs_eps, ["trace"], ctx=ctx,
                                        curve=curve) if remote else None
            self.robots = Robots(self.budget, remote=remote, max_robots=cfg.max_robots,
                                 period_ns=self.period_ns)
            if self.batcher is not None:
                self.robots.set_batches(b for b in md.batches if b <= self.max_batch)
                self._profile_batches()
            self.pub = Publisher(action_endpoint, cfg.name, ctx=ctx, curve=curve)
            self.heartbeat = HeartbeatResponder(self.pub, cfg.name, period_s=1.0 / cfg.health_hz)
            self.trace = TraceWriter(cfg.trace_path) if cfg.trace_path else None
        except BaseException:
            self.close()
            raise
        self.hist = {k: LatencyHistogram() for k in ("ttft", "per_token", "cycle", "compute")}
        self.counters = dict.fromkeys(("cycles", "obs_bad", "obs_held", "waypoints",
                                       "publish_dropped", "slack_unknown"), 0)
        self.state, self.running = "run", True
        self.slack_ns: int | None = None  # the last cycle's own slack (a gauge)
        self.complaints = Complaints(cfg.name)  # loud, rate-limited error lines
        # with CURVE a robot is its key: an obs whose src is not its key's name is refused
        self.identity = Identity.of(curve, action_endpoint, self.complaints.say)
        self._next_health = 0
        # bound once: no allocation per cycle
        self._on_waypoint = self._publish_values if md.kind == "chunk" else self._publish_waypoint

    def _batcher(self, md, opts: dict, endpoints: int) -> BatchRunner | None:
        """A BatchRunner where batching applies (an action-token model with batched graphs,
        ONNX Runtime fp32, greedy, a drafter that batches, cfg.batch not 1, and several obs
        endpoints unless cfg.batch asks for it), else None; sets self.max_batch."""
        cfg, self.max_batch = self.cfg, 1
        if md.kind == "chunk" or not md.batches or cfg.batch == 1 or \
                (cfg.batch is None and endpoints < 2):
            return None
        why = ("sampling" if cfg.sample else f"--backend {cfg.backend}" if cfg.backend != "onnx"
               else f"--drafter {cfg.drafter}" if cfg.drafter not in BATCH_DRAFTERS
               else f"--precision {opts['precision']}" if opts.get("precision") not in
               (None, "fp32", "float32") else None)
        if why is not None:
            if cfg.batch is not None:
                raise ModelError(f"--batch {cfg.batch}: batched decoding is greedy fp32 on ONNX "
                                 f"Runtime with drafter {' or '.join(BATCH_DRAFTERS)}, not "
                                 f"{why}; leave --batch out or use --batch 1")
            return None
        self.max_batch = min(cfg.batch or max(md.batches), max(md.batches))
        return BatchRunner(md, drafter=cfg.drafter, threads=cfg.threads, spin=opts.get("spin"),
                           k_verify=self.decoder.k_verify)

    def _profile_batches(self, rounds: int = 3) -> None:
        """The latency table: each batch size (and 1) timed on a synthetic observation at full
        quality, no previous chunk, after WARM_UP untimed runs; the median of `rounds` (one
        preemption must not price a size out: batch_ns scales the table by batch 1's measured
        p99 over its entry here). Admission and batch sizes plan with it until real batches
        of that size are timed (robots.Robots.batch_ns)."""
        md, level = self.model, self.budget.levels[0]
        instr = np.zeros(md.obs.instr_length, np.int64)
        obs = np.zeros(md.obs.length, np.int64)
        table = {}
        for b in self.robots.batches:
            times = []
            for i in range(WARM_UP + rounds):
                t0 = now_ns()
                if b == 1:
                    self.runner.run(instr, obs, None, level)
                else:
                    self.batcher.run([Row(Cycle(0, {}, None, level, level.chunk, ""), instr, obs)
                                      for _ in range(b)])
                times.append(now_ns() - t0)
            table[b] = int(np.median(times[WARM_UP:]))
        self.robots.set_profile(table)
        self.runner.reset()
        self.batcher.counters.update(dict.fromkeys(self.batcher.counters, 0))

    @property
    def robot_clock(self) -> PeerClock | None:
        """The first robot's clock (another host's; None on one host or before a robot)."""
        first = next(iter(self.robots.slots.values()), None)
        return None if first is None else first.clock

    # --- loop -----------------------------------------------------------------------------
    def spin_once(self, timeout_ms: int = 50) -> bool:
        """Handle control messages, take the observations that arrived, and answer the robot
        whose chunk is due first (with the robots batched beside it, where the model
        batches). True if any was answered."""
        self._housekeeping()
        self._take_observations(timeout_ms)
        slots = self.robots.next_batch(self.budget.deadline_ns, now_ns(), self.max_batch)
        if not slots:
            return False
        jobs = []
        for slot in slots:
            env, slot.waiting = slot.waiting, None
            if self.state == "hold":
                self.counters["obs_held"] += 1
                continue
            try:
                jobs.append((slot, env, self._encode(env.body)))
            except WireError as e:
                self.counters["obs_bad"] += 1
                slot.counters["obs_bad"] += 1
                why = str(e)
                self.complaints.say("obs_bad", lambda: f"observation {env.seq} from {env.src} "
                                                       f"does not fit the model, not answered: {why}")
        if len(jobs) == 1:
            self._infer(*jobs[0])
        elif jobs:
            self._infer_batch(jobs)
        return bool(jobs)

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
            self._profile(env)  # a second robot joins before any cycle was timed
        robots.offer(env, now_ns(), self.budget.deadline_ns)
        self._say(robots.said)

    def _say(self, said: list) -> None:
        """Print the robots' lines (text, is_error) on stderr, once each."""
        for text, error in said:
            print(f"{self.cfg.name}: {'error: ' if error else ''}{text}", file=sys.stderr,
                  flush=True)
        said.clear()

    def _profile(self, env, rounds: int = 5) -> None:
        """Time `rounds` cycles at full quality on this observation (after WARM_UP untimed
        ones: a session's first runs are slow), publishing nothing: the cycle cost admission
        plans with until real cycles are timed."""
        try:
            inputs = self._encode(env.body)
        except WireError:
            return  # counted when it is answered
        level, kept = self.budget.levels[0], getattr(self.runner, "previous", None)
        for i in range(WARM_UP + rounds):
            t0 = now_ns()
            self._run(Cycle(env.seq, {}, None, level, level.chunk, env.src), inputs, None)
            if i >= WARM_UP:
                self.robots.cost.record(now_ns() - t0)
        if self.decoder is not None:
            self.runner.previous = kept

    def run(self, seconds: float | None = None) -> None:
        """Spin until a `stop` command, stop(), or `seconds` elapse."""
        spin(self, seconds, 50)

    def stop(self) -> None:
        self.running = False

    # --- one cycle --------------------------------------------------------------------------
    def _cycle(self, slot: RobotSlot, env, t_start: int) -> tuple[Cycle, int]:
        """The cycle answering env, and its recv stamp (this robot's clock bracketed)."""
        level = slot.budget.level
        t_recv = env.stamps.get("recv", t_start)
        if slot.clock is not None and "publish" in env.stamps:
            slot.clock.from_peer(env.stamps["publish"], t_recv)
        return Cycle(env.seq, carried_stamps(env.stamps, t_recv), env.stamps.get("capture"),
                     level, level.chunk, env.src), t_recv

    def _infer(self, slot: RobotSlot, env, inputs) -> None:
        t_start = now_ns()
        cycle, t_recv = self._cycle(slot, env, t_start)
        if self.decoder is not None:  # this robot's previous chunk drafts its next
            self.runner.previous = slot.previous
        out = self._run(cycle, inputs, self._on_waypoint)
        if self.decoder is not None:
            slot.previous = self.runner.previous
        t_end = now_ns()
        self.hist["compute"].record(t_end - t_start)
        if self.counters["cycles"] >= WARM_UP:  # a session's first runs are slow
            self.robots.cost.record(t_end - t_start)
        self._account(slot, cycle, t_recv, t_end, len(out),
                      self.decoder.stats if self.decoder is not None else None)

    def _infer_batch(self, jobs: list) -> None:
        """Several robots' cycles in one batch (same budget level: next_batch's choice)."""
        t_start = now_ns()
        rows, recvs = [], []
        for slot, env, (instr, obs) in jobs:
            cycle, t_recv = self._cycle(slot, env, t_start)
            rows.append(Row(cycle, instr, obs, slot.previous))
            recvs.append(t_recv)
        outs = self.batcher.run(rows, self._on_waypoint)
        t_end = now_ns()
        self.hist["compute"].record(t_end - t_start)
        if self.counters["cycles"] >= WARM_UP:
            self.robots.costs[self.batcher.batch_for(len(rows))].record(t_end - t_start)
        for i, ((slot, _, _), row) in enumerate(zip(jobs, rows)):
            slot.previous = row.previous
            self._account(slot, row.cycle, recvs[i], t_end, len(outs[i]), self.batcher.stats[i])

    def _publish_waypoint(self, cycle: Cycle, index: int, bins: np.ndarray) -> None:
        """An action-token waypoint: its tokens and their bin centres."""
        tokens = bins.astype(np.int32)
        self._send(cycle, waypoint_body(
            cycle.seq, index, cycle.count, self.tokenizer.decode(tokens), spec=self.spec_hash,
            period_ns=self.period_ns, start_ns=self.start_ns, dest=cycle.dest, tokens=tokens))

    def _publish_values(self, cycle: Cycle, index: int, values: np.ndarray) -> None:
        """A continuous waypoint: its values only."""
        self._send(cycle, waypoint_body(
            cycle.seq, index, cycle.count, values, spec=self.spec_hash,
            period_ns=self.period_ns, start_ns=self.start_ns, dest=cycle.dest))

    def _send(self, cycle: Cycle, body: dict) -> None:
        st = dict(cycle.stamps)
        st["first_token"] = cycle.first_token_ns
        st["publish"] = now_ns()
        cycle.last_publish_ns = st["publish"]
        if cycle.first_publish_ns is None:
            cycle.first_publish_ns = st["publish"]
            slot = self.robots.slots.get(cycle.dest)
            if slot is not None:
                slot.sent_ns.append(st["publish"])
        to = cycle.dest if self.cfg.address_chunks else None
        if not self.pub.publish("action_chunk", body, st, to=to):
            self.counters["publish_dropped"] += 1
        self.counters["waypoints"] += 1

    def _account(self, slot: RobotSlot, cycle: Cycle, t_recv: int, t_end: int, n: int,
                 st=None) -> None:
        """One answered cycle into the counters, histograms, slack and trace (st: its
        DecodeStats, for an action-token policy)."""
        t_first = cycle.first_token_ns
        self.counters["cycles"] += 1
        slot.counters["cycles"] += 1
        self.hist["ttft"].record(t_first - t_recv)
        self.hist["per_token"].record((t_end - t_first) // max(n - 1, 1))
        self.hist["cycle"].record(t_end - t_recv)
        slack = self._slack_ns(slot, cycle)
        if slack is not None:
            self.slack_ns = slot.slack_ns = slack
            slot.budget.update(slack)
        if self.trace is not None:
            fields = {"ttft_us": (t_first - t_recv) / 1e3,
                      "per_token_us": (t_end - t_first) / max(n - 1, 1) / 1e3,
                      "level": float(slot.budget.index),
                      "skipped": float(slot.counters["obs_superseded"])}
            if st is not None:
                fields["tokens_per_pass"] = st.tokens_per_target_pass
                fields["accepted_per_verify"] = st.accepted / max(st.verifies, 1)
            self.trace.write({"node": self.cfg.name, "cycle": cycle.seq,
                              "stamps": {**cycle.stamps, "first_token": t_first,
                                         "last_publish": cycle.last_publish_ns or t_end,
                                         "end": t_end},
                              "fields": fields})

    def _slack_ns(self, slot: RobotSlot, cycle: Cycle) -> int | None:
        """deadline - (last publish - capture), capture on this node's clock; None if unknown.
        The last waypoint: the controller rejects any waypoint past the deadline, so a chunk
        is on time only when its last one is."""
        if cycle.capture is None or cycle.last_publish_ns is None:
            return None
        offset = 0 if slot.clock is None else slot.clock.offset_ns
        if offset is None:  # another host's clock, not yet bracketed both ways
            self.counters["slack_unknown"] += 1
            return None
        return slot.budget.deadline_ns - (cycle.last_publish_ns - (cycle.capture - offset))

    # --- control, heartbeat, health -----------------------------------------------------
    def _housekeeping(self) -> None:
        if self.ctl_sub is not None:
            for topic, env in self.ctl_sub.poll_latest(0).items():
                if topic == "heartbeat":  # the monitor's ping: echo it (clock offsets)
                    self.heartbeat.on_ping(env)
                elif topic == "budget":
                    if self.cfg.auto_budget:  # a fixed-budget node ignores the monitor too
                        for b in self._budgets():
                            b.set_monitor_level(env.body["level"])
                elif env.body["cmd"] == "stop":
                    self.running = False
                else:
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
            self._say(self.robots.said)
            self.heartbeat.beat(now)
            self.pub.publish("health", self.health())

    def _budgets(self) -> list:
        return [self.budget] + [s.budget for s in self.robots.slots.values()
                                if s.budget is not self.budget]

    def _on_robot_trace(self, env) -> None:
        """A robot's trace of one of our waypoint 0s: a node -> robot message (its publish
        on our clock, its recv on the robot's). Others' traces are ignored."""
        slot = self.robots.slots.get(env.src)
        st = env.body["stamps"]
        if slot is not None and "recv" in st and st.get("publish") in slot.sent_ns:
            slot.clock.to_peer(st["publish"], st["recv"])

    def health(self) -> dict:
        """`health` body: counters (node, subscriber, drafters) and latency gauges (us)."""
        slots = list(self.robots.slots.values())
        c = {**self.counters, **self.runner.counters, **self.robots.counters,
             **(self.batcher.counters if self.batcher is not None else {}),
             "robots": len(slots),
             "obs_skipped": sum(s.counters["obs_superseded"] for s in slots),
             "robot_restarts": sum(s.counters["restarts"] for s in slots),
             "obs_rejected": self.obs_sub.counters["rejected"],
             "obs_oversize": self.obs_sub.counters["oversize"],
             "obs_sessions_ended": self.obs_sub.sessions_ended,
             **self.identity.counters, "keys_revoked": self.pub.revocations,
             "budget_level": self.budget.index, "budget_switches": self.budget.switches}
        for name, d in self.drafters.items():
            c.update({f"{name}.{k}": v for k, v in d.stats.items()})
        g = {f"{k}_p{p}_us": float(self.hist[k].percentiles_us()[f"p{p}"])
             for k in self.hist for p in (50, 99)}
        if self.slack_ns is not None:
            g["slack_us"] = self.slack_ns / 1e3
        offset = self.robot_clock.offset_ns if self.robot_clock is not None else None
        if offset is not None:
            g["robot_clock_offset_us"] = offset / 1e3
        if len(slots) > 1 or self.robots.refused:  # per robot, when there are several
            for s in slots:
                c[f"robot.{s.name}.cycles"] = s.counters["cycles"]
                c[f"robot.{s.name}.budget_level"] = s.budget.index
                if s.slack_ns is not None:
                    g[f"robot.{s.name}.slack_us"] = s.slack_ns / 1e3
        for name in self.robots.refused:  # refused and not admitted since (the dashboard)
            c[f"robot.{name}.refused"] = 1
        if self.robots.chunk_ns:
            g["cycle_cost_us"] = self.robots.chunk_ns / 1e3
        for b in self.robots.batches[1:]:
            cost = self.robots.batch_ns(b)
            if cost:
                g[f"batch_cost_us.b{b}"] = cost / 1e3
        return {"node": self.cfg.name, "state": self.state, "counters": c, "gauges": g}

    def close(self) -> None:
        for s in (self.obs_sub, self.ctl_sub, self.trace_sub, self.pub, self.trace):
            if s is not None:
                s.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rtinfer.inference.node", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--obs", required=True, nargs="+",
                   help="the endpoint(s) the robots' obs publishers bind (one or more robots)")
    p.add_argument("--actions", required=True, help="endpoint this node binds for actions")
    p.add_argument("--control", default=None, help="endpoint of budget/command messages")
    p.add_argument("--backend", default="onnx")
    p.add_argument("--drafter", default="chunk", choices=DRAFTERS)
    p.add_argument("--draft-model", default=None, metavar="DIR",
                   help="--drafter model: the draft model directory (default: the model's "
                        "draft/ folder, else card.json draft_model)")
    p.add_argument("--name", default="infer")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=None,
                   help="the most robots decoded in one batch (default: with several --obs "
                        "endpoints, the largest batch the model ships, where batching applies: "
                        "greedy fp32 ONNX Runtime with drafter chunk or none; 1: one robot at "
                        "a time)")
    p.add_argument("--address-chunks", action="store_true",
                   help="send each robot's chunks in a topic frame addressed to it, so each "
                        "robot receives only its own; every controller must take addressed "
                        "chunks (controllers.run --addressed, the C++ client's --addressed)")
    p.add_argument("--max-robots", type=int, default=None,
                   help="serve at most this many robots (default: as many as the measured "
                        "cycle time fits at the policy's rate)")
    p.add_argument("--precision", default=None, choices=list(PRECISIONS),
                   help="action-token policy on --backend onnx: which graph set of graphs.json "
                        "runs (default fp32)")
    p.add_argument("--deadline-ms", type=float, default=100.0)
    p.add_argument("--no-prefix-cache", action="store_true")
    p.add_argument("--budget", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-budget: fixed full-quality level, ignoring slack and the monitor")
    p.add_argument("--level", type=int, default=None,
                   help="fixed at this budget level (0 = full quality; -1 = the cheapest), "
                        "ignoring slack and the monitor, as --no-budget does")
    p.add_argument("--sample", action="store_true")
    p.add_argument("--trace", default=None)
    p.add_argument("--seconds", type=float, default=None)
    add_curve_arguments(p)
    a = p.parse_args(argv)
    curve = curve_from_args(p, a, binds=[a.actions], connects=[*a.obs, a.control])
    try:
        cfg = InferenceNodeConfig(name=a.name, backend=a.backend, drafter=a.drafter,
                                  draft_model=a.draft_model,
                                  sample=a.sample, prefix_cache=not a.no_prefix_cache,
                                  deadline_ms=a.deadline_ms,
                                  auto_budget=a.budget and a.level is None,
                                  threads=a.threads, trace_path=a.trace,
                                  max_robots=a.max_robots, batch=a.batch,
                                  address_chunks=a.address_chunks)
    except ValueError as e:
        p.error(str(e))
    if a.precision and a.backend != "onnx":
        p.error(f"--precision {a.precision}: the graph sets run on --backend onnx")
    try:
        node = InferenceNode(a.model, a.obs, a.actions, control_endpoint=a.control, cfg=cfg,
                             curve=curve,
                             backend_opts={"precision": a.precision} if a.precision else None)
    except (ModelError, EndpointInUse) as e:  # BackendError too: one line with the fix
        print(f"{cfg.name}: error: {e}", file=sys.stderr, flush=True)
        return 2
    if a.precision and node.model.kind == "chunk":
        node.close()
        p.error(f"--precision {a.precision}: a continuous-chunk policy has one graph per "
                "level and no precision sets; leave --precision out")
    if a.level is not None:
        n = len(node.budget.levels)
        if not -n <= a.level < n:
            node.close()
            p.error(f"--level {a.level}: this model has {n} budget levels (0 .. {n - 1}, "
                    f"or -1 for the cheapest)")
        node.budget.own_level = node.budget._last = a.level % n
    stop_on_signals(node)
    if node.model.kind == "chunk":
        n = len(node.budget.levels)
        print(f"{cfg.name}: ready ({cfg.backend}, continuous-chunk policy, {n} budget level"
              + ("s)" if n > 1 else "; a one-shot graph without alternatives: a shorter chunk "
                 "saves no compute, so the budget has nothing cheaper to switch to)"), flush=True)
    else:
        prec = f" {a.precision}" if a.precision else ""
        batch = f", batches of up to {node.max_batch}" if node.batcher is not None else ""
        print(f"{cfg.name}: ready ({cfg.backend}{prec}, drafter {cfg.drafter}{batch})", flush=True)
    try:
        node.run(a.seconds)
    finally:
        node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
