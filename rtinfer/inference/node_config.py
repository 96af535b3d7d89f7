"""The inference node's configuration: a dataclass, and the command line that fills it.

InferenceNodeConfig is checked when built (ValueError: what is wrong and the fix);
arguments() is `python -m rtinfer.inference.node`'s parser, its options generated from the
dataclass (rtinfer.realtime.config_cli: a field is declared once), config(p, a) its parsed
arguments as a config (a bad one is a usage error, exit 2).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rtinfer.inference.runner import DRAFTERS
from rtinfer.model.directory import PRECISIONS
from rtinfer.realtime.config_cli import add_config_arguments, config_from_args, option
from rtinfer.realtime.deadline import DEADLINE_MS
from rtinfer.transport.curve import add_curve_arguments

# flow_rtc: training-time conditioning, RTC guidance toward the committed prefix, or toward
# the left-over of the chunk it comes from (the paper's soft mask)
FLOW_RTC = ("condition", "guide", "guide-left-over")


@dataclass
class InferenceNodeConfig:
    name: str = option("infer", help="the node's name: the wire source of its messages")
    backend: str = option("onnx", help="onnx (default), torch or tensorrt")
    drafter: str = option("chunk", choices=DRAFTERS, help="where speculative drafts come from")
    draft_model: str | None = option(
        None,
        help="--drafter model: the draft model directory "
        "(default: the model's draft/ folder, else card.json "
        "draft_model)",
    )
    sample: bool = option(False, help="sample (Leviathan/Chen rejection) instead of greedy")
    temperature: float = option(1.0, help="with --sample (1.0: the model's own distribution)")
    prefix_cache: bool = option(True, help="keep the instruction prefix KV-cached across cycles")
    deadline_ms: float = option(DEADLINE_MS, help="capture -> first setpoint applied")
    auto_budget: bool = option(
        True,
        flag="--budget",
        help="--no-budget: fixed full-quality level, ignoring slack and the monitor",
    )
    health_hz: float = option(1.0, help="health and heartbeat messages per second")
    threads: int = option(1, help="ONNX Runtime intra-op threads")
    trace_path: str | None = option(None, flag="--trace", help="write a trace record per cycle")
    seed: int = option(0, help="the sampler's seed")
    max_robots: int | None = option(
        None,
        help="serve at most this many robots (default: as "
        "many as the measured cycle time fits at the policy's rate)",
    )
    batch: int | None = option(
        None,
        help="the most robots decoded in one batch (default: with "
        "several --obs endpoints, the largest batch the model ships, "
        "where batching applies: greedy fp32 ONNX Runtime with drafter "
        "chunk or none; 1: one robot at a time)",
    )
    flow_rtc: str = option(
        "condition",
        choices=FLOW_RTC,
        help="how a flow policy conditions "
        "a chunk on a robot's committed prefix: condition (training-time, "
        "per-waypoint t; the step graph must take it), guide (RTC "
        "guidance toward the prefix, arXiv 2506.07339; any euler policy) "
        "or guide-left-over (toward the rest of its chunk too)",
    )
    address_chunks: bool = option(
        False,
        help="send each robot's chunks in a topic frame "
        "addressed to it, so each robot receives only its own; every "
        "controller must take addressed chunks (controllers.run "
        "--addressed, the C++ client's --addressed)",
    )

    def __post_init__(self) -> None:
        def need(ok: bool, what: str, fix: str) -> None:
            if not ok:
                raise ValueError(f"InferenceNodeConfig: {what}: {fix}")

        need(bool(self.name), "name is empty", "give the node a name (it is the wire source)")
        need(
            self.drafter in DRAFTERS,
            f"drafter {self.drafter!r} is unknown",
            f"use one of {', '.join(DRAFTERS)}",
        )
        need(self.deadline_ms > 0, f"deadline_ms is {self.deadline_ms}", "use a deadline > 0 ms")
        need(self.health_hz > 0, f"health_hz is {self.health_hz}", "use a rate > 0 Hz")
        need(self.threads >= 1, f"threads is {self.threads}", "use at least 1 thread")
        need(
            self.batch is None or self.batch >= 1,
            f"batch is {self.batch}",
            "use 1 (no batching) or more, or leave it out (the model's largest batch)",
        )
        need(
            self.max_robots is None or self.max_robots >= 1,
            f"max_robots is {self.max_robots}",
            "use at least 1 robot, or leave it out",
        )
        need(
            self.temperature > 0,
            f"temperature is {self.temperature}",
            "use a temperature > 0 (1.0: the model's own distribution)",
        )


def arguments(description: str) -> argparse.ArgumentParser:
    """The command line: the endpoints and the model, then one option per config field."""
    p = argparse.ArgumentParser(prog="python -m rtinfer.inference.node", description=description)
    p.add_argument("--model", required=True)
    p.add_argument(
        "--obs",
        nargs="+",
        default=[],
        help="the endpoint(s) the robots' obs publishers bind (one or more robots)",
    )
    p.add_argument(
        "--robots-file",
        default=None,
        help="robots learned at run time: a JSON file {robot: obs endpoint}, "
        "re-read when it changes (rtinfer.inference.robots_file)",
    )
    p.add_argument("--actions", required=True, help="endpoint this node binds for actions")
    p.add_argument("--control", default=None, help="endpoint of budget/command messages")
    add_config_arguments(p, InferenceNodeConfig)
    p.add_argument(
        "--precision",
        default=None,
        choices=list(PRECISIONS),
        help="action-token policy on --backend onnx: which graph set of graphs.json "
        "runs (default fp32)",
    )
    p.add_argument(
        "--level",
        type=int,
        default=None,
        help="fixed at this budget level (0 = full quality; -1 = the cheapest), "
        "ignoring slack and the monitor, as --no-budget does",
    )
    p.add_argument("--seconds", type=float, default=None)
    add_curve_arguments(p)
    return p


def config(p: argparse.ArgumentParser, a: argparse.Namespace) -> InferenceNodeConfig:
    """The config the parsed arguments ask for; a bad one is p.error (exit 2)."""
    if not a.obs and not a.robots_file:
        p.error("give the robots' obs endpoints: --obs EP [EP ...], or --robots-file FILE")
    try:
        cfg = config_from_args(
            InferenceNodeConfig, a, **({"auto_budget": False} if a.level is not None else {})
        )
    except ValueError as e:
        p.error(str(e))
    if a.precision and cfg.backend != "onnx":
        p.error(f"--precision {a.precision}: the graph sets run on --backend onnx")
    return cfg
