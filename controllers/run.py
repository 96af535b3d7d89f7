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
import inspect
import json
import sys
from pathlib import Path

import yaml

from rtinfer.launch.entry import EntryError, package_file, resolve
from rtinfer.model.action_spec import FORMAT as ACTION_SPEC_FORMAT, ActionSpec
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.realtime.deadline import DEADLINE_MS
from rtinfer.realtime.os_setup import configure_realtime, realtime_gc
from rtinfer.realtime.report_file import write_report
from rtinfer.realtime.spin import on_signals
from rtinfer.realtime.trace import TraceWriter
from rtinfer.transport.bus import EndpointInUse, Publisher, Subscriber
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.transport.heartbeat import HeartbeatResponder

from .config import ControlConfig
from .hardware import DriverError
from .node import RUN, ControllerConfig, ControllerNode, obs_spec_from
from .old_hooks import old_hook_lines
from .rtc import RtcConfig

PING_EVERY = 10  # ticks between polls of the monitor's heartbeat pings
HW_HEALTH_NS = 500_000_000  # a simulator's own health: twice a second
ROBOT_KEYS = ("name", "control", "hardware")


class RobotProcess:
    """A HardwareInterface behind a ControllerNode, with its sockets, heartbeats and trace.
    Not thread-safe: run() from one thread; stop() may come from a signal handler."""

    def __init__(self, hw, control: ControlConfig, *, robot: str, obs: str,
                 actions: str | list[str],
                 control_endpoint: str | None = None, tokenizer: TokenizerConfig | None = None,
                 action: ActionSpec | None = None, name: str = "controller",
                 deadline_ms: float = DEADLINE_MS, policy_hz: float = 20.0,
                 trace_path: str | None = None, curve=None, addressed: bool = False,
                 obs_spec=None, rtc: RtcConfig | None = None):
        """robot: the src of this robot's messages (its chunks carry it as dest). name: the
        controller's node name (health, trace). tokenizer / action: the policy's spec (at
        least one); obs_spec: its observation spec (ObsSpec or ObsTokens; None: the driver's
        observations go out unchecked). curve: the bus ``curve=`` for every socket.
        addressed: take only the chunks addressed to this robot (a policy node run with
        --address-chunks): libzmq filters the other robots' chunks at the node. rtc: send
        the committed prefix with each observation (real-time chunking, controllers.rtc)."""
        cfg = ControllerConfig(control, tokenizer=tokenizer, action=action, obs=obs_spec,
                               name=name, deadline_ns=int(deadline_ms * 1e6),
                               chunk_interval_ns=int(1e9 / policy_hz), rtc=rtc)  # checked first
        self.hw, self.robot = hw, robot
        self.pub = Publisher(obs, robot, bind=True, curve=curve)
        # The policy binds its actions endpoint; the monitor binds the control endpoint.
        self.sub = Subscriber(([actions] if isinstance(actions, str) else [*actions])
                              + ([control_endpoint] if control_endpoint else []),
                              ["action_chunk", "command"], curve=curve,
                              to={"action_chunk": robot} if addressed else None)
        # Round-trip echoes for the monitor's clock-offset estimate go out on the obs PUB.
        self.pings = Subscriber(control_endpoint, ["heartbeat"], curve=curve) \
            if control_endpoint else None
        self.hb = HeartbeatResponder(self.pub, name)
        self.trace = TraceWriter(trace_path) if trace_path else None
        self._advance = getattr(hw, "advance", None)
        self._hw_health = getattr(hw, "health", None)
        self._next_hw_health_ns = 0
        self._on_hold = getattr(hw, "on_hold", None)
        self._tracking = False   # the controller was following a chunk at its last tick
        self.signalled = False   # stopped by SIGTERM/SIGINT
        self.driver_error: DriverError | None = None  # the driver bug that ended the run
        self.node = ControllerNode(hw, cfg, self.sub, self.pub, trace=self.trace,
                                   on_tick=self._on_tick, one_source=True)

    def _on_tick(self, state, now_ns: int) -> None:
        """After the controller's tick: a simulator's step, its health, heartbeats."""
        node = self.node
        self._tracking = node.state == RUN
        if self._advance is not None and self._driver("advance", self._advance, now_ns,
                                                      node.counters["chunks_accepted"] > 0):
            node.stop()  # the simulator's episode is over: the loop ends after this tick
        if self._hw_health is not None and now_ns >= self._next_hw_health_ns:
            self._next_hw_health_ns = now_ns + HW_HEALTH_NS
            self._publish_hw_health("run")
        if self.pings is not None and node.counters["ticks"] % PING_EVERY == 0:
            self.hb.poll(self.pings)
        self.hb.beat(now_ns)

    def _driver(self, method: str, call, *args):
        try:
            return call(*args)
        except Exception as e:  # a bug in the driver: the run ends, naming it
            raise DriverError(f"{type(self.hw).__name__}.{method}", e) from e

    def _publish_hw_health(self, state: str) -> None:
        body = self._driver("health", self._hw_health, self.robot, state)
        if body is not None:
            self.pub.publish("health", body)

    def run(self, seconds: float | None = None) -> dict:
        """The loop, with the GC frozen, until `seconds` (None: until stopped); the report.
        A driver bug ends the loop early: `driver_error`, and the report up to it."""
        try:
            with realtime_gc():
                self.node.run(seconds)
            if self._tracking and self._on_hold is not None:  # stopped while following a
                self.node.counters["holds"] += 1                 # chunk: the robot holds
                self._driver("on_hold", self._on_hold, self.node.clock())
            if self._hw_health is not None:
                self._publish_hw_health("stopped")  # the dashboard's last counts: the report's
        except DriverError as e:
            self.driver_error = e
        return self.report()

    def stop(self) -> None:
        """End the loop after the current tick (safe from a signal handler)."""
        self.node.stop()

    def report(self) -> dict:
        """controller, stack (the limits), bus (what the sockets dropped), e2e_ms, and the
        hardware's report(); with `driver_error` (one line) when a driver bug ended the run."""
        node = self.node
        e2e = node.reports.e2e.percentiles_us()
        bus = {k: v for k, v in node.health_counters().items() if k.startswith(("sub.", "pub."))}
        out = {"controller": dict(node.counters), "stack": dict(node.stack.counters), "bus": bus,
               "e2e_ms": {k: (v / 1e3 if k != "count" else v) for k, v in e2e.items()}}
        if self.driver_error is not None:
            out["driver_error"] = str(self.driver_error)
        extra = getattr(self.hw, "report", None)
        try:
            return {**out, **(extra() if extra is not None else {})}
        except Exception:
            if self.driver_error is None:
                raise
            return out  # a broken driver's own report: the run's counters matter more

    def close(self) -> None:
        for c in (self.trace, self.pub, self.sub, self.pings):
            if c is not None:
                c.close()
        closer = getattr(self.hw, "close", None)
        if closer is not None:
            closer()

    def run_until_signalled(self, seconds: float | None = None) -> dict:
        """run(), stopping cleanly on SIGTERM/SIGINT; closes everything; the report."""
        def on_signal(_signum):
            self.signalled = True
            self.stop()
        try:
            with on_signals(on_signal):
                return self.run(seconds)
        finally:
            self.close()


def load_policy_spec(path: str | Path) -> tuple[TokenizerConfig | None, ActionSpec | None]:
    """The spec a policy's chunks carry: from a model directory (its tokenizer.json and/or
    action_spec.json) or one of those files. ValueError says what is wrong and the fix."""
    p = package_file(str(path))
    files = [p / "tokenizer.json", p / "action_spec.json"] if p.is_dir() else [p]
    found = [f for f in files if f.is_file()]
    if not found:
        raise ValueError(f"{path}: no policy spec there (a model directory with tokenizer.json "
                         "or action_spec.json, or one of those files); check --model")
    tok = act = None
    for f in found:
        try:
            doc = json.loads(f.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("format") == ACTION_SPEC_FORMAT:
                act = ActionSpec.from_dict(doc)
            else:
                tok = TokenizerConfig.from_dict(doc)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{f}: not a valid action spec or tokenizer config: {e}") from None
    return tok, act


def load_robot(path: str | Path) -> tuple[str, ControlConfig, dict]:
    """(name, control, hardware kwargs) from a robot YAML file; ValueError names the problem."""
    try:
        doc = yaml.safe_load(package_file(str(path)).read_text())
    except OSError as e:
        raise ValueError(f"robot config {path}: {e.strerror}; check --config") from None
    except yaml.YAMLError as e:
        raise ValueError(f"robot config {path}: not valid YAML: {e}".replace("\n", " ")) from None
    if not isinstance(doc, dict) or set(doc) - set(ROBOT_KEYS) or "control" not in doc:
        keys = sorted(doc) if isinstance(doc, dict) else doc
        raise ValueError(f"robot config {path}: needs `control` and may have {list(ROBOT_KEYS)}, "
                         f"got {keys}")
    hardware = doc.get("hardware") or {}
    if not isinstance(hardware, dict):
        raise ValueError(f"robot config {path}: `hardware` must be a mapping of keyword "
                         "arguments for the hardware class")
    try:
        control = ControlConfig.from_dict(doc["control"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"robot config {path}: {e}") from None
    return str(doc.get("name") or "robot"), control, hardware


def hardware_class(ref: str):
    """The class named by MODULE:CLASS; ValueError says why not."""
    try:
        return resolve(ref)
    except EntryError as e:
        raise ValueError(f"--hardware {ref!r}: {e} (give it as MODULE:CLASS, e.g. "
                         "examples.arm_reach.sim:ArmSim, importable from this directory or "
                         "installed)") from None


def build_hardware(cls, control: ControlConfig, hardware: dict):
    """cls(control, **hardware), its keyword arguments checked against its signature first."""
    params = list(inspect.signature(cls).parameters.values())[1:]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        known = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        unknown = sorted(set(hardware) - set(known))
        if unknown:
            raise ValueError(f"hardware options {unknown} are not {cls.__name__}'s; it takes "
                             f"{known}")
    return cls(control, **hardware)


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--set {item!r}: give it as KEY=VALUE, e.g. --set seed=3")
        out[key] = yaml.safe_load(value)
    return out


def load_obs_spec(path: str | Path):
    """The observation spec of the policy at `path` (a model directory: its obs_spec.json or
    obs_tokens.json), or None (none there, or `path` names a spec file)."""
    p = package_file(str(path))
    for name in ("obs_spec.json", "obs_tokens.json"):
        f = p / name
        if p.is_dir() and f.is_file():
            try:
                return obs_spec_from(json.loads(f.read_text()))
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{f}: not a valid observation spec: {e}") from None
    return None


def bus_drops(report: dict, who: str = "robot") -> None:
    """One line on stderr when the sockets dropped messages before the controller saw them."""
    drops = {k: v for k, v in report["bus"].items() if v}
    if drops:
        print(f"{who}: warning: the bus dropped messages: {drops} (sub.rejected: malformed or "
              "not of the wire's schema; sub.oversize: over the size limit; pub.dropped: "
              "not sent); see docs/robots.md section 6", file=sys.stderr, flush=True)


def never_followed(report: dict, who: str = "robot") -> int:
    """1, with one error line saying why, when a run ended without a single chunk followed
    (the robot stood still throughout); else 0. The line names the counters that explain
    it: the controller's rejections, else its observations (none sent, and why), else the
    driver's own counters (its report's sections)."""
    counters = report["controller"]
    if counters["chunks_accepted"]:
        return 0
    why = {k: v for k, v in counters.items() if k.startswith("rejected_") and v}
    print(f"{who}: error: no action chunk was accepted in the whole run; "
          + (f"rejected: {why} (the controller's error lines above say why)" if why else
             none_arrived(report)), file=sys.stderr, flush=True)
    return 1


def none_arrived(report: dict) -> str:
    """Why no chunk came, as far as this robot can tell (never_followed)."""
    c = report["controller"]
    if not c["obs_sent"]:
        if c["obs_bad"] or c["obs_dropped"]:
            return (f"none arrived, and the robot sent no observation: obs_bad: {c['obs_bad']} "
                    "(not what the policy's spec names: the line above says why; fix the "
                    f"driver's observe()), obs_dropped: {c['obs_dropped']} (the bus refused "
                    "them)")
        return ("none arrived, and the robot sent no observation: the driver's observe() "
                "returned none, or it has no observe() (docs/robots.md section 2)")
    counted = driver_counters(report)
    return (f"none arrived for the {c['obs_sent']} observations sent: is the policy running "
            "and connected to this robot's endpoints, and are the observations' stamps on "
            "this host's clock (the policy drops one older than the deadline: obs_stale in "
            "its health)?" + (f" The driver counted: {counted}" if counted else ""))


def driver_counters(report: dict, most: int = 12) -> str:
    """The driver's non-zero counters (its report()'s sections, SECTION.KEY=N), for a line."""
    out = []
    for section, d in report.items():
        if section in ("controller", "stack", "bus", "e2e_ms") or not isinstance(d, dict):
            continue
        for k, v in d.items():
            for kk, vv in (v.items() if isinstance(v, dict) else [("", v)]):
                if isinstance(vv, int) and not isinstance(vv, bool) and vv:
                    out.append(f"{section}.{k}{'.' + kk if kk else ''}={vv}")
    return ", ".join(out[:most]) + (", ..." if len(out) > most else "")


def emit_report(report: dict, path: str | None) -> None:
    """Print the report as JSON, and write it to `path` when given."""
    text = json.dumps(report, indent=1)
    why = write_report(path, text) if path else None  # whole or not at all (a full disk)
    if why:
        print(f"report {path} not written: {why}", file=sys.stderr)
    print(text)


class OneLineParser(argparse.ArgumentParser):
    """argparse, whose usage errors are the one line `PROG: error: ...` (exit 2), without
    the usage block before it (--help still prints it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m controllers.run", description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", required=True, help="MODULE:CLASS of the HardwareInterface")
    ap.add_argument("--config", required=True, help="the robot YAML (docs/robots.md)")
    ap.add_argument("--model", required=True, help="the policy: a model directory, or its "
                    "action_spec.json or tokenizer.json")
    ap.add_argument("--obs", required=True, help="endpoint to bind: obs, health, trace")
    ap.add_argument("--actions", required=True, nargs="+",
                    help="the policy's action endpoint (connect; several: a fleet's nodes, "
                         "with --addressed it follows its chunks from whichever serves it)")
    ap.add_argument("--control", default=None, help="the monitor's command endpoint (connect)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one `hardware:` entry of the robot file (VALUE as YAML)")
    ap.add_argument("--robot", default=None, help="the robot's name (default: the robot "
                    "file's `name`): one robot file can serve several robots of a kind")
    ap.add_argument("--name", default="controller", help="the controller's node name")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long")
    ap.add_argument("--deadline-ms", type=float, default=DEADLINE_MS,
                    help="capture -> first setpoint applied; an older chunk is rejected")
    ap.add_argument("--policy-hz", type=float, default=20.0,
                    help="how often fresh chunks come (the watchdog's expected interval)")
    ap.add_argument("--addressed", action="store_true",
                    help="take only the chunks addressed to this robot: for a policy node "
                    "run with --address-chunks (it serves several robots)")
    ap.add_argument("--rtc", action="store_true",
                    help="real-time chunking: send the plan's committed prefix with each "
                    "observation and take chunks conditioned on it (docs/robots.md)")
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
            print(f"robot: warning: {line}", file=sys.stderr, flush=True)
        hw = build_hardware(cls, control, {**hardware, **parse_sets(a.set)})
        return RobotProcess(hw, control, robot=robot, obs=a.obs, actions=a.actions,
                            control_endpoint=a.control, tokenizer=tok, action=act, name=a.name,
                            deadline_ms=a.deadline_ms, policy_hz=a.policy_hz,
                            trace_path=a.trace, curve=curve, addressed=a.addressed,
                            obs_spec=obs_spec, rtc=RtcConfig() if a.rtc else None)
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
        print(f"robot: error: {proc.driver_error}: a bug in the driver ended the run (its "
              "report is written); fix that method, or raise HardwareFault for a failed "
              "transfer", file=sys.stderr, flush=True)
        return 1
    return 0 if proc.signalled else never_followed(report)


if __name__ == "__main__":
    sys.exit(main())
