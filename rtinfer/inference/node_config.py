"""The inference node's configuration: a dataclass, and the command line that fills it.

InferenceNodeConfig is checked when built (ValueError: what is wrong and the fix);
arguments() is `python -m rtinfer.inference.node`'s parser, config(p, a) its parsed
arguments as a config (a bad one is a usage error, exit 2).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from rtinfer.inference.runner import DRAFTERS
from rtinfer.model.directory import PRECISIONS
from rtinfer.transport.curve import add_curve_arguments


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


def arguments(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rtinfer.inference.node", description=description)
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
    return p


def config(p: argparse.ArgumentParser, a: argparse.Namespace) -> InferenceNodeConfig:
    """The config the parsed arguments ask for; a bad one is p.error (exit 2)."""
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
    return cfg
