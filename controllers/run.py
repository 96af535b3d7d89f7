"""The robot side as a process: any HardwareInterface and a robot file, on the bus.

    python -m controllers.run --hardware MODULE:CLASS --config ROBOT.yaml --model POLICY \
        --obs ENDPOINT --actions ENDPOINT [--control ENDPOINT] [--set KEY=VALUE ...]

ROBOT.yaml (docs/robots.md; a path, or PACKAGE:NAME for a file inside an importable package):

    name: arm                 # the robot's name: the src of its messages, the dest of its chunks
    control: {axes: [...], tool: {...}, rate_hz: 1000}    # controllers.config.ControlConfig
    hardware: {port: /dev/ttyUSB0}                         # keyword arguments for CLASS

CLASS is called as CLASS(control, **hardware), `control` being the parsed ControlConfig;
`--set KEY=VALUE` overrides one `hardware` entry (VALUE read as YAML). POLICY is the policy's
model directory, or its action_spec.json or tokenizer.json: the robot follows chunks of that
spec only, and the spec is checked against the axes (names, units, ranges) before the first
tick. The loop ticks at control.rate_hz until --seconds pass, a `stop` command, the hardware
stopping it, or SIGINT/SIGTERM (all clean: the report is still written). This process binds
ENDPOINT --obs (the driver's observations as `obs`, health, trace, heartbeat echoes and a
simulator's own health) and connects to the policy's --actions and the monitor's --control.

A driver class with a hook an earlier contract named (on_tick, on_stop), or without observe()
while the policy takes observations, gets one line at start-up saying what replaced it
(controllers.old_hooks). Exit status: 0; 1 when the run ended without a single chunk
followed (said on stderr, with the counters that explain it) or when a driver method
raised something other than HardwareFault (the report is written first, then one line
naming the method); 2 for a usage or configuration error (one line, with the fix).
"""

from __future__ import annotations

import argparse
import sys

from rtinfer.realtime.complaints import say
from rtinfer.realtime.deadline import DEADLINE_MS
from rtinfer.realtime.os_setup import configure_realtime
from rtinfer.transport.bus import EndpointInUse
from rtinfer.transport.curve import add_curve_arguments, curve_from_args

from .old_hooks import old_hook_lines
from .robot_files import (
    ROBOT_KEYS,
    build_hardware,
    card_max_committed,
    hardware_class,
    load_obs_spec,
    load_policy_spec,
    load_robot,
    parse_sets,
)
from .robot_process import RobotProcess
from .rtc import RtcConfig
from .run_report import bus_drops, driver_counters, emit_report, never_followed, none_arrived

__all__ = [
    "ROBOT_KEYS",
    "RobotProcess",
    "build_hardware",
    "bus_drops",
    "driver_counters",
    "emit_report",
    "hardware_class",
    "load_obs_spec",
    "load_policy_spec",
    "load_robot",
    "main",
    "make_process",
    "never_followed",
    "none_arrived",
    "parse_sets",
    "parser",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse, whose usage errors are the one line `PROG: error: ...` (exit 2), without
    the usage block before it (--help still prints it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m controllers.run", description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", required=True, help="MODULE:CLASS of the HardwareInterface")
    ap.add_argument("--config", required=True, help="the robot YAML (docs/robots.md)")
    ap.add_argument(
        "--model",
        required=True,
        help="the policy: a model directory, or its action_spec.json or tokenizer.json",
    )
    ap.add_argument("--obs", required=True, help="endpoint to bind: obs, health, trace")
    ap.add_argument(
        "--actions",
        required=True,
        nargs="+",
        help="the policy's action endpoint (connect; several: a fleet's nodes, "
        "with --addressed it follows its chunks from whichever serves it)",
    )
    ap.add_argument("--control", default=None, help="the monitor's command endpoint (connect)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one `hardware:` entry of the robot file (VALUE as YAML)",
    )
    ap.add_argument(
        "--robot",
        default=None,
        help="the robot's name (default: the robot "
        "file's `name`): one robot file can serve several robots of a kind",
    )
    ap.add_argument("--name", default="controller", help="the controller's node name")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long")
    ap.add_argument(
        "--deadline-ms",
        type=float,
        default=DEADLINE_MS,
        help="capture -> first setpoint applied; an older chunk is rejected",
    )
    ap.add_argument(
        "--policy-hz",
        type=float,
        default=20.0,
        help="how often fresh chunks come (the watchdog's expected interval)",
    )
    ap.add_argument(
        "--addressed",
        action="store_true",
        help="take only the chunks addressed to this robot: for a policy node "
        "run with --address-chunks (it serves several robots)",
    )
    ap.add_argument(
        "--rtc",
        action="store_true",
        help="real-time chunking: send the plan's committed prefix with each "
        "observation and take chunks conditioned on it (docs/robots.md)",
    )
    ap.add_argument(
        "--open-loop-ms",
        type=float,
        default=None,
        help="take a node's asks under overload (an executed horizon, a slower "
        "observation rate): execute one chunk up to this long after its capture",
    )
    ap.add_argument("--cpu", type=int, default=None, help="pin the loop to this CPU")
    ap.add_argument("--trace", default=None, help="write trace records here")
    ap.add_argument("--report", default=None, help="write the final report JSON here")
    add_curve_arguments(ap)
    return ap


def make_process(ap: argparse.ArgumentParser, a: argparse.Namespace) -> RobotProcess:
    """A RobotProcess from the parsed options; a bad option or file is ap.error (exit 2)."""
    curve = curve_from_args(ap, a, binds=[a.obs], connects=[*a.actions, a.control])
    try:
        if a.deadline_ms <= 0 or a.policy_hz <= 0:
            raise ValueError("--deadline-ms and --policy-hz must be > 0")
        robot, control, hardware = load_robot(a.config)
        robot = a.robot or robot
        tok, act = load_policy_spec(a.model)
        obs_spec = load_obs_spec(a.model)
        cls = hardware_class(a.hardware)
        for line in old_hook_lines(cls, obs_spec is not None):
            say("robot", f"warning: {line}", error=False)
        hw = build_hardware(cls, control, {**hardware, **parse_sets(a.set)})
        rtc = RtcConfig(max_committed=card_max_committed(a.model)) if a.rtc else None
        return RobotProcess(
            hw,
            control,
            robot=robot,
            obs=a.obs,
            actions=a.actions,
            control_endpoint=a.control,
            tokenizer=tok,
            action=act,
            name=a.name,
            deadline_ms=a.deadline_ms,
            policy_hz=a.policy_hz,
            trace_path=a.trace,
            curve=curve,
            addressed=a.addressed,
            obs_spec=obs_spec,
            rtc=rtc,
            open_loop_ms=a.open_loop_ms,
        )
    except (ValueError, EndpointInUse) as e:
        ap.error(str(e))


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    configure_realtime(cpus=None if a.cpu is None else [a.cpu])
    proc = make_process(ap, a)
    report = proc.run_until_signalled(a.seconds)
    emit_report(report, a.report)
    bus_drops(report)
    if proc.driver_error is not None:
        say(
            "robot",
            f"{proc.driver_error}: a bug in the driver ended the run (its report is "
            "written); fix that method, or raise HardwareFault for a failed transfer",
        )
        return 1
    return 0 if proc.signalled else never_followed(report)


if __name__ == "__main__":
    sys.exit(main())
