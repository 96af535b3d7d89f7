"""Real-time chunking in lockstep: the conveyor cell, its controller and the policy in one
process on one simulated clock, with the delay in sim time (`rtinfer bench rtc --lockstep`).

Deterministic and load-free: it says whether a policy with RTC can sort at a delay d in
principle, apart from the host. The parts are the real ones, not copies: the robot is a
controllers.node.ControllerNode over the cell (sim_node.ConveyorSim: read, observe, PID,
write, a 1 ms physics step per tick), with its Commitments (controllers.rtc) when the arm is
rtc; the node side is the policy the node loads (load_policy), its CommittedIntake and its
WaypointPublisher. Between them two DelayLines stand for the network: each message is
encoded with the wire codec and decoded d/2 of sim time later (jittered per message, seeded,
as the delay proxy does). The node answers an observation at once when it lands (its
inference takes no sim time: d is the whole capture -> chunk delay), so a chunk from an
observation captured at t reaches the robot at t + d, and the robot commits exactly what it
executes meanwhile. Figures as the real-time bench's (rtinfer.bench.rtc.figures).

    python -m examples.conveyor_sorting.rtc_lockstep --model models/zoo/conveyor-flow \
        --delays-ms 0 50 100 200 --seconds 20 --json
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from controllers.controller_config import ControllerConfig
from controllers.node import STOPPED, ControllerNode
from controllers.robot_files import load_obs_spec, load_policy_spec, load_robot
from controllers.rtc import RtcConfig
from rtinfer.bench.options import DEFAULT_MODEL
from rtinfer.bench.rtc import ARMS, ROBOT_YAML, figures, keep_waypoint, whole_chunks
from rtinfer.inference.budget import Budget, BudgetLevel
from rtinfer.inference.committed_intake import REFUSED, CommittedIntake
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.node_config import FLOW_RTC, InferenceNodeConfig
from rtinfer.inference.policy import load_policy
from rtinfer.inference.robots import Robots
from rtinfer.inference.waypoint_publisher import WaypointPublisher
from rtinfer.realtime.trace import TraceWriter
from rtinfer.transport.action_chunk import carried_stamps

from .config import CellConfig, tokenizer_config
from .delay_line import DelayLine, SimClock
from .expert import JoiningExpert, ScriptedExpert
from .observe import obs_from_body
from .sim_node import ConveyorSim

MS = 1_000_000
JOIN_MAX = 8  # committed waypoints the joining expert conditions on (conveyor-flow's max)


class ExpertPolicy:
    """The scripted expert behind the policy surface the node's parts read, planning the
    model's horizon: in its tokenizer's tokens for an action-token model, else in its action
    spec (`--expert`: what the task allows at a delay, apart from what a policy learnt). It
    cannot condition (max_committed 0), unless `joins`: then it conditions on up to
    JOIN_MAX committed waypoints (JoiningExpert, predicting: its plan continued from the
    prefix's last waypoint, its decisions taken there)."""

    max_committed = 0

    def __init__(self, model: str, joins: bool = False):
        tok, act = load_policy_spec(model)
        cell = CellConfig()
        self.tokens = act is None  # the robot follows this model's token chunks
        if act is None:
            assert tok is not None
            plans = tok
            self.spec_hash, self.period_ns, self.start_ns = tok.hash, tok.period_ns, tok.period_ns
            horizon, self.action_dim = tok.horizon, tok.dim
        else:
            plans = tokenizer_config(cell, horizon=act.horizon)
            self.spec_hash, self.period_ns, self.start_ns = act.hash, act.period_ns, act.start_ns
            horizon, self.action_dim = act.horizon, act.dim
        self.expert = (
            JoiningExpert(cell, plans, predict=True) if joins else ScriptedExpert(cell, plans)
        )
        self.levels = [BudgetLevel(0, 0, horizon)]
        if joins:
            self.max_committed = min(JOIN_MAX, horizon - 1)

    def encode(self, body: dict) -> dict:
        return obs_from_body(body)

    def run(self, jobs: list, emit) -> list:
        out = []
        for cycle, obs in jobs:
            if self.max_committed:  # the chunk starts with the prefix, exactly
                c = cycle.committed
                self.expert.prefix = None if c is None else np.asarray(c.values, float)
                if c is not None:
                    c.used = True
            tokens, chunk = self.expert.act_tokens(obs)
            emit(cycle, 0, chunk[: cycle.count], tokens[: cycle.count] if self.tokens else None)
            out.append(chunk)
        return out


class LockstepNode:
    """The node's side of one robot: an observation in, its chunk out on `out` at once."""

    def __init__(
        self,
        model: str,
        out: DelayLine,
        clock: SimClock,
        seed: int,
        expert: bool | str = False,
        flow_rtc: str = "condition",
    ):
        self.policy = (
            ExpertPolicy(model, joins=expert == "joins")
            if expert
            else load_policy(
                model,
                InferenceNodeConfig(seed=seed, auto_budget=False, flow_rtc=flow_rtc),
                clock=clock,
            )
        )
        self.lines: list[str] = []
        say = lambda kind, text, error=True: self.lines.append(  # noqa: E731
            text() if callable(text) else text
        )
        self.committed = CommittedIntake(self.policy, say)
        # no robot slots: the one robot is answered at once, nothing is scheduled or granted
        robots = Robots(
            Budget(self.policy.levels, 100 * MS, auto=False),
            remote=False,
            period_ns=self.policy.period_ns,
            say=say,
        )
        self.out = WaypointPublisher(out, self.policy, robots, address=False, clock=clock, say=say)
        self.clock = clock
        self.previous = None
        self.probe: list | None = None  # --probe-suction: [free switches, conditioned follows]

    def probe_suction(self, inputs, values: np.ndarray, seq: int) -> None:
        """Would the chunk unconditioned (same observation, same noise) switch the suction
        right after the committed prefix, and does the conditioned one switch with it?"""
        run, seed, n = self.policy.runner.run, (self.policy.seed, 0, int(seq)), len(values)
        free = round(float(run(inputs, 0, seed=seed)[n, 3]))
        cond = round(float(run(inputs, 0, seed=seed, committed=values)[n, 3]))
        if free != round(float(values[-1, 3])):
            self.probe[0] += 1
            self.probe[1] += cond == free

    def answer(self, env) -> None:
        inputs = self.policy.encode(env.body)
        committed = self.committed.take(env)
        if committed is REFUSED:
            return
        if self.probe is not None and committed is not None:
            self.probe_suction(inputs, committed.values, env.seq)
        level = self.policy.levels[0]  # fixed full quality, as the bench's --no-budget
        cycle = Cycle(
            env.seq,
            carried_stamps(env.stamps, self.clock()),
            env.stamps.get("capture"),
            level,
            level.chunk,
            env.src,
            self.previous,
            committed=committed,
        )
        self.policy.run([(cycle, inputs)], self.out.publish)
        self.previous = cycle.previous  # the robot's previous chunk, as the node keeps it


def robot_config(
    model: str, arm: str, deadline_ms: float, blend_ms: float
) -> tuple[ControllerConfig, dict]:
    """The cell's controller as controllers.run builds it for `arm`; the robot file's
    hardware options."""
    _, control, hardware = load_robot(ROBOT_YAML)
    if arm == "blend":
        control = replace(control, blend_ns=int(blend_ms * MS))
    tok, act = load_policy_spec(model)
    return ControllerConfig(
        control,
        tokenizer=tok,
        action=act,
        obs=load_obs_spec(model),
        deadline_ns=int(deadline_ms * MS),
        chunk_interval_ns=50 * MS,
        rtc=RtcConfig() if arm == "rtc" else None,
    ), hardware


def run_point(
    model: str,
    arm: str,
    delay_ms: float,
    seed: int,
    *,
    seconds: float,
    deadline_ms: float = 100.0,
    jitter: float = 0.0,
    blend_ms: float = 100.0,
    tmp: Path,
    expert: bool | str = False,
    flow_rtc: str = "condition",
    probe: bool = False,
) -> dict:
    """One seeded run of `arm` at `delay_ms` added (half each way); the bench's figures."""
    clock = SimClock()
    half, jit = int(delay_ms * MS / 2), int(jitter * delay_ms * MS / 2)
    obs_line = DelayLine("sim", clock, {"obs"}, half, jit, seed)
    act_line = DelayLine("infer", clock, {"action_chunk"}, half, jit, seed + 1)
    node = LockstepNode(model, act_line, clock, seed, expert, flow_rtc)
    node.probe = [0, 0] if probe else None
    cfg, hardware = robot_config(model, arm, deadline_ms + delay_ms, blend_ms)
    sim = ConveyorSim(
        cfg.control,
        **{**hardware, "seed": seed, "seconds": seconds, "wait_s": 5.0, "policy": model},
    )
    trace_path = tmp / f"{arm}-{delay_ms:g}-{seed}.trace"
    trace = TraceWriter(str(trace_path))
    robot = ControllerNode(sim, cfg, act_line, obs_line, clock=clock, trace=trace, robot="sim")
    chunks: dict = {}
    act_line.tap = lambda env: keep_waypoint(chunks, env)
    while robot.state != STOPPED:
        robot.tick()
        if sim.advance(clock(), robot.counters["chunks_accepted"] > 0):
            break
        while (env := obs_line.recv()) is not None:
            node.answer(env)
        clock.now_ns += MS
    trace.close()
    e2e = robot.reports.e2e.percentiles_us()
    report = {
        "controller": dict(robot.counters),
        "metrics": sim.cell.metrics.as_dict(),
        "e2e_ms": {k: (v / 1e3 if k != "count" else v) for k, v in e2e.items()},
    }
    out = figures(report, trace_path, whole_chunks(chunks), deadline_ms + delay_ms)
    out["node_lines"] = sorted(set(node.lines))[:5]
    if node.probe is not None:
        out["suction_switches"] = dict(zip(("unconditioned", "conditioned_too"), node.probe))
    return out


def _line(fig: dict) -> str:
    x = fig["jump_pos_m"]["x"]
    return (
        f"{fig['arm']:5s} {fig['delay_ms']:5.0f} ms run {fig['run']}: {fig['correct']} / "
        f"{fig['resolved']} sorted, x jump p99 {x and x['p99']}, conditioned "
        f"{fig['chunks_conditioned']} / {fig['chunks_accepted']}, holds {fig['holds']}, "
        f"mismatches {fig['prefix_mismatch']}, stale applied {fig['stale_applied']}"
        + (f", suction switches {fig['suction_switches']}" if "suction_switches" in fig else "")
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.rtc_lockstep", description=__doc__.splitlines()[0]
    )
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--delays-ms", type=float, nargs="+", default=[0.0, 50.0, 100.0, 200.0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--deadline-ms", type=float, default=100.0)
    p.add_argument("--jitter", type=float, default=0.0)
    p.add_argument("--blend-ms", type=float, default=100.0)
    p.add_argument(
        "--expert",
        action="store_true",
        help="the scripted expert as the policy "
        "(the model's action spec and horizon): what the task allows at each delay",
    )
    p.add_argument(
        "--expert-joins",
        action="store_true",
        help="with --expert: the expert conditions on the committed prefix (its plan and "
        "its decisions continued from the prefix's last waypoint), as a policy with RTC would",
    )
    p.add_argument(
        "--flow-rtc",
        default="condition",
        choices=FLOW_RTC,
        help="the node's flow_rtc: how a flow policy conditions on the prefix",
    )
    p.add_argument(
        "--probe-suction",
        action="store_true",
        help="per conditioned cycle, also "
        "run the chunk unconditioned from the same noise: how often it switches the "
        "suction right after the prefix, and how often the conditioned one does too",
    )
    p.add_argument("--json", action="store_true", help="print the points as JSON")
    a = p.parse_args(argv)
    points = []
    with tempfile.TemporaryDirectory(prefix="rtinfer-rtc-lockstep-") as d:
        for delay in a.delays_ms:
            for r in range(a.runs):
                for arm in a.arms:
                    fig = run_point(
                        a.model,
                        arm,
                        delay,
                        a.seed + r,
                        seconds=a.seconds,
                        deadline_ms=a.deadline_ms,
                        jitter=a.jitter,
                        blend_ms=a.blend_ms,
                        tmp=Path(d),
                        expert="joins" if a.expert and a.expert_joins else a.expert,
                        flow_rtc=a.flow_rtc,
                        probe=a.probe_suction,
                    )
                    points.append({"arm": arm, "delay_ms": delay, "run": r, **fig})
                    if not a.json:
                        print(_line(points[-1]), flush=True)
    if a.json:
        print(json.dumps(points))
    return 0


if __name__ == "__main__":
    sys.exit(main())
