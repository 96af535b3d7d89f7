"""The controller's own cost per tick, against the tick's budget, for 1 to N axes.

One tick of controllers.node.ControllerNode (drain messages, read, tracker -> per-mode law
-> limits, write, stamps, health) on controllers.simulated.SimulatedAxes, back to back and
unpaced, so what is measured is the work, not the sleep. A policy sends a 4-waypoint chunk
every 50 ticks over real (inproc) ZeroMQ, so the chunk-arrival ticks are in the tail. The
robot sizes run alternately in blocks (A B C A B C ...) in one process; the result is each
size's p50/p99/p99.9/max in us, its ratio to the 1-axis baseline of the same run, and its
p99 as a share of the 1 ms tick of a 1 kHz loop.
"""

from __future__ import annotations

import itertools
import sys
import time

import numpy as np
import zmq

from controllers.node import ControllerConfig, ControllerNode
from controllers.simulated import SimulatedAxes, uniform_robot
from rtinfer.bench.options import emit, parser
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

PERIOD_NS = 50_000_000
CHUNK_EVERY = 50  # ticks
_ids = itertools.count()


class _Robot:
    def __init__(self, n: int, mode: str, ctx):
        k = next(_ids)
        control = uniform_robot(n, mode)
        self.n, self.hw = n, SimulatedAxes(control)
        self.spec = control.action_spec(4, PERIOD_NS)
        self.policy = Publisher(f"inproc://bench-tick-p{k}", "policy", ctx=ctx)
        sub = Subscriber(f"inproc://bench-tick-p{k}", ["action_chunk", "command"], ctx=ctx)
        pub = Publisher(f"inproc://bench-tick-h{k}", "robot", ctx=ctx)
        self.node = ControllerNode(
            self.hw,
            ControllerConfig(control, action=self.spec, chunk_interval_ns=PERIOD_NS),
            sub,
            pub,
        )
        self.closers: list[Publisher | Subscriber] = [self.policy, sub, pub]
        self.hist, self.cycle = LatencyHistogram(), 0
        while self.node.counters["commands"] == 0:  # the slow joiner
            self.policy.publish("command", {"cmd": "clear", "reason": "sync"})
            self.node.tick()
            time.sleep(0.001)

    def block(self, ticks: int) -> None:
        hw, node, hist = self.hw, self.node, self.hist
        for t in range(ticks):
            if t % CHUNK_EVERY == 0:
                self.cycle += 1
                target = np.full(self.n, 0.5 * (-1) ** self.cycle, np.float32)
                for i in range(4):
                    self.policy.publish(
                        "action_chunk",
                        waypoint_body(
                            self.cycle,
                            i,
                            4,
                            target,
                            spec=self.spec.hash,
                            period_ns=PERIOD_NS,
                            start_ns=PERIOD_NS,
                            dest="robot",
                        ),
                        {"capture": now_ns()},
                    )
            t0 = time.perf_counter_ns()
            node.tick()
            hist.record(time.perf_counter_ns() - t0)
            hw.step(hw.dt_s)

    def close(self) -> None:
        for c in self.closers:
            c.close()


def run(ticks: int = 20000, axes=(1, 3, 6), mode: str = "effort", blocks: int = 10) -> dict:
    ctx = zmq.Context()
    robots = [_Robot(n, mode, ctx) for n in axes]
    try:
        for _ in range(blocks):
            for r in robots:
                r.block(max(CHUNK_EVERY, ticks // blocks))
        base = robots[0].hist.percentiles_us()
        out = {
            "mode": mode,
            "ticks_per_size": blocks * max(CHUNK_EVERY, ticks // blocks),
            "blocks": blocks,
            "baseline_axes": axes[0],
            "sizes": {},
        }
        for r in robots:
            p = r.hist.percentiles_us()
            c = r.node.counters
            out["sizes"][str(r.n)] = {
                "p50_us": p["p50"],
                "p99_us": p["p99"],
                "p999_us": p["p999"],
                "max_us": p["max"],
                "ratio_p50": round(p["p50"] / base["p50"], 3),
                "ratio_p99": round(p["p99"] / base["p99"], 3),
                "p99_share_of_1ms": round(p["p99"] / 1000.0, 3),
                "chunks_accepted": c["chunks_accepted"],
                "rejected": sum(v for k, v in c.items() if k.startswith("rejected_")),
            }
        return out
    finally:
        for r in robots:
            r.close()
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench tick`: the controller's cost per tick for 1, 3 and 6 axes."""
    p = parser("tick", main.__doc__)
    p.add_argument("--ticks", type=int, default=20000, help="ticks per robot size")
    p.add_argument(
        "--axes",
        type=int,
        nargs="+",
        default=[1, 3, 6],
        help="robot sizes; the first is the baseline",
    )
    p.add_argument("--mode", choices=("position", "velocity", "effort"), default="effort")
    a = p.parse_args(argv)
    if a.ticks < 1 or any(n < 1 for n in a.axes):
        p.error("--ticks and every --axes value must be >= 1")
    return emit("tick", run(a.ticks, tuple(a.axes), a.mode), a.json)


if __name__ == "__main__":
    sys.exit(main())
