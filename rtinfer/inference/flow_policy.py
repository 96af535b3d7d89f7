"""FlowPolicy: a flow-matching or diffusion policy (a FlowModelDir) behind the policy surface
of rtinfer.inference.policy, so the node, wire, controller and monitor serve it unchanged.

Per cycle: the prefix graph once, then the cycle's level's K steps from noise seeded with
(the node's seed, the robot's name, the observation's seq), so a run replays exactly and two
cycles never share noise; zero noise where graphs.json says noise "zero" (allowed only with
zero_noise_ok). The chunk [H, D] exists at once and is emitted whole, as a continuous-chunk
policy's. A step graph's NaN reaches the chunk (clipping keeps NaN) and the node drops it.
Levels: one per manifest level (its steps, its graph), full quality first; where card.json
gives every level an accuracy, a level that a cheaper one beats is left out (flow_levels).
Real-time chunking: max_committed is the action spec's where every level's step graph is Euler
with per-waypoint t [1, H_m] (it conditions on committed waypoints fed clean at t = 0, up to
the delay it was trained for, which the action spec declares, else card.json); 0 otherwise,
or where neither declares it, and the node says at start-up that it cannot condition.
With the node's flow_rtc "guide" (ONNX Runtime, any Euler policy) the chunk is RTC guidance
toward the committed prefix instead (rtinfer.inference.flow_guidance: jacobian identity,
LeRobot's; weight 1 over the prefix, which is all a robot sends); "guide-left-over" also
toward the rest of the chunk the prefix comes from, weights decaying after the prefix (the
paper's soft mask; the node keeps the robot's previous chunk). max_committed is then the
declared one, else the horizon less one.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

from rtinfer.inference.budget import BudgetLevel
from rtinfer.inference.flow_guidance import FlowGuidance
from rtinfer.inference.flow_runner import FlowRunner
from rtinfer.inference.flow_trt import FlowTrtRunner
from rtinfer.inference.graph_runner import FeedInputs
from rtinfer.model.directory import ModelError
from rtinfer.model.flow_model import FlowModelDir
from rtinfer.transport.wire import now_ns

BACKENDS = ("onnx", "tensorrt")


def flow_levels(model: FlowModelDir) -> list[BudgetLevel]:
    """A BudgetLevel per manifest level (`depth` is the level's index, the whole horizon, the
    card's accuracy); a measured level worse than a cheaper measured one is left out."""
    levels = [
        BudgetLevel(lv["level"], 0, model.action.horizon, model.accuracy(lv["level"]))
        for lv in model.levels
    ]
    if any(lv.accuracy is None for lv in levels):
        return levels
    return [
        lv
        for i, lv in enumerate(levels)
        if i == 0 or not any(c.accuracy > lv.accuracy for c in levels[i + 1 :])
    ]


def conditions_on(md: FlowModelDir, runner, guided: bool = False) -> int:
    """The most committed waypoints the policy conditions a chunk on (see the docstring);
    guided (RTC guidance): any euler policy, up to the declared delay, else the horizon
    less one."""
    used = {lv["graph"] for lv in md.levels}
    if (
        md.integrator != "euler"
        or not guided
        and not all(tuple(runner.t[g].shape) == (1, runner.h_m) for g in used)
    ):
        return 0
    m = md.action.max_committed
    m = md.card.get("max_committed") if m is None else m  # checked at load (model.card)
    return int(md.action.horizon - 1 if m is None and guided else m or 0)


class FlowPolicy(FeedInputs):
    batches, max_batch = [1], 1

    def __init__(
        self,
        md: FlowModelDir,
        cfg,
        backend_opts: dict,
        endpoints: int,
        *,
        clock: Callable[[], int] = now_ns,
    ):
        """clock: the node's monotonic ns clock, which stamps each cycle's first_token."""
        if cfg.backend not in BACKENDS:
            raise ModelError(
                f"{md.path}: a flow policy runs on ONNX Runtime or TensorRT; use "
                f"--backend onnx (not {cfg.backend})"
            )
        if backend_opts.get("precision"):
            raise ModelError(
                f"--precision {backend_opts['precision']}: a flow policy has one "
                "set of graphs and no precision sets; leave --precision out"
            )
        self.model, self.clock = md, clock
        if cfg.backend == "tensorrt":
            self.runner = FlowTrtRunner(md)
        else:
            self.runner = FlowRunner(md, threads=cfg.threads, spin=backend_opts.get("spin"))
        self.seed = int(cfg.seed) % 2**64
        self.zero_noise = md.noise == "zero"
        self.levels = flow_levels(md)
        self.spec_hash, self.period_ns = md.action.hash, md.action.period_ns
        self.start_ns, self.action_dim = md.action.start_ns, md.action.dim
        # RTC guidance (flow_rtc "guide", ONNX Runtime): bends each step toward the prefix
        self.guide = (
            FlowGuidance(self.runner)
            if cfg.flow_rtc.startswith("guide")
            and cfg.backend == "onnx"
            and md.integrator == "euler"
            else None
        )
        self.whole_left_over = cfg.flow_rtc == "guide-left-over"
        self.max_committed = conditions_on(md, self.runner, self.guide is not None)
        self.counters = {"flow_steps": 0}
        ladder = ", ".join(str(md.levels[lv.depth]["steps"]) for lv in self.levels)
        noise = "zero noise" if self.zero_noise else f"noise seeded from {cfg.seed}"
        self.summary = (
            f"{cfg.backend}, flow policy ({md.integrator}, steps per level {ladder}, {noise})"
        )

    def noise_seed(self, cycle) -> tuple[int, int, int] | None:
        """The cycle's noise seed (None: zero noise): the node's seed, the robot, the seq."""
        if self.zero_noise:
            return None
        return self.seed, zlib.crc32(cycle.dest.encode()), int(cycle.seq) % 2**64

    def run(self, jobs: list, emit=None) -> list[np.ndarray]:
        """Each job's chunk [horizon, D] float32 (a view of the runner's chunk buffer)."""
        out = []
        for cycle, feeds in jobs:
            level = cycle.level.depth
            c = cycle.committed  # the robot's committed prefix: only when max_committed > 0
            if self.guide is not None and c is not None:
                left = self.left_over(cycle.previous, c) if self.whole_left_over else c.values
                chunk = self.guide.run(feeds, level, left, c.n, seed=self.noise_seed(cycle))
            else:
                chunk = self.runner.run(
                    feeds,
                    level,
                    seed=self.noise_seed(cycle),
                    committed=None if c is None else c.values,
                )
            if c is not None:  # the committed rows as the robot sent them, bit for bit (the
                chunk[: c.n] = c.values  # affine's round trip may differ in the last ulp)
                c.used = True  # every waypoint names it (docs/wire.md, real-time chunking)
            if self.whole_left_over:  # the robot's next left-over comes from it
                cycle.previous = (chunk.copy(), cycle.seq)
            self.counters["flow_steps"] += self.model.levels[level]["steps"]
            cycle.first_token_ns = self.clock()
            if emit is not None:
                emit(cycle, 0, chunk[: cycle.count], None)
            out.append(chunk)
        return out

    @staticmethod
    def left_over(previous: tuple | None, c) -> np.ndarray:
        """What guidance bends a chunk toward: the chunk the prefix comes from, from the
        prefix on (the paper's left-over; weights 1 over the prefix, decaying after it), when
        it is the chunk this node sent the robot last; else the committed prefix alone."""
        if previous is None or previous[1] != c.chunk:
            return c.values
        return previous[0][c.start :]

    def figures(self) -> dict:
        return dict(self.counters)

    def clear_figures(self) -> None:
        self.counters["flow_steps"] = 0
