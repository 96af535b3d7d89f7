"""The robot process: the MuJoCo cell behind a ControllerNode, paced to the wall clock.

One tick = read -> PID -> write -> one 1 ms physics step. Every policy period the tick also
publishes an `obs` message stamped `capture` (what a perception stage would send). Action
chunks arrive on the controller's subscriber (connected to the policy's and the monitor's endpoints); health
and trace go out on the obs publisher, which this process binds.

    python -m examples.conveyor_sorting.sim_node --obs ipc:///tmp/obs --actions ipc:///tmp/act \
        --seconds 60 --report out.json [--curve-secret K.key_secret --curve-map curve.json]
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import replace

from controllers.node import ControllerNode, ControllerConfig
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.heartbeat import HeartbeatResponder
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.realtime.os_setup import configure_realtime, realtime_gc
from rtinfer.realtime.trace import TraceWriter

from .cell import ConveyorCell
from .config import (BELT_SPEED_MAX, CellConfig, action_spec, control_config, parse_belt_speed,
                     parse_seed, parse_instruction, tokenizer_config)
from .observe import obs_body, observe


class SimNode:
    """A ConveyorCell + ControllerNode + obs publisher. Not thread-safe."""

    def __init__(self, obs_endpoint: str, actions_endpoint: str, *, control_endpoint: str | None = None,
                 cell: CellConfig | None = None,
                 policy_hz: float = 20.0, seed: int = 0, instruction=None,
                 trace_path: str | None = None, deadline_ms: float = 100.0, curve=None):
        """curve: bus ``curve=`` for every socket (keys.curve_configs: per endpoint).
        instruction: the bin of each object class (None: drawn from the seed)."""
        self.cell = ConveyorCell(cell or CellConfig())
        self.seed = seed
        self.cell.reset(seed, instruction)
        tok = tokenizer_config(self.cell.cfg)
        self.pub = Publisher(obs_endpoint, "sim", bind=True, curve=curve)
        # The policy binds its actions endpoint; the monitor binds the control endpoint.
        self.sub = Subscriber([actions_endpoint] + ([control_endpoint] if control_endpoint else []),
                              ["action_chunk", "command"], curve=curve)
        self.trace = TraceWriter(trace_path) if trace_path else None
        # Round-trip echoes for the monitor's clock-offset estimate go out on the obs PUB.
        self.pings = Subscriber(control_endpoint, ["heartbeat"], curve=curve) \
            if control_endpoint else None
        self.hb = HeartbeatResponder(self.pub, "controller")
        cfg = ControllerConfig(tokenizer=tok, control=control_config(self.cell.cfg), name="controller",
                               action=action_spec(self.cell.cfg),
                               deadline_ns=int(deadline_ms * 1e6),
                               chunk_interval_ns=int(1e9 / policy_hz))
        self.node = ControllerNode(self.cell, cfg, self.sub, self.pub, trace=self.trace,
                                   on_tick=self._on_tick)
        self._obs_every = max(1, int(round(1000.0 / policy_hz)))  # ticks per observation
        self._health_every = 500                                   # cell metrics at 2 Hz
        self._tick = 0
        self.obs_sent = 0
        self._end_ns = 0          # set when the cell starts: it runs `seconds` from then
        self._seconds = 0.0
        self._wait_until_ns = 0
        self.frozen = True        # physics waits for the policy's first chunk (or wait_s)
        self.signalled = False    # stopped by SIGTERM/SIGINT (run_sim)

    def _on_tick(self, state, now_ns: int) -> None:
        if self.frozen:
            # Observations go out, but the world stands still until the policy answers, so a
            # slow policy start (loading sessions) does not cost objects.
            if self.node.counters["chunks_accepted"] == 0 and now_ns < self._wait_until_ns:
                self._tick += 1
                if self._tick % self._obs_every == 0:
                    self.pub.publish("obs", obs_body(observe(self.cell)), {"capture": now_ns})
                return
            self.frozen, self._end_ns = False, now_ns + int(self._seconds * 1e9)
        if now_ns >= self._end_ns:
            self.stop()
        self.cell.step()
        self._tick += 1
        if self._tick % self._obs_every == 0:
            if self.pub.publish("obs", obs_body(observe(self.cell)), {"capture": now_ns}):
                self.obs_sent += 1
        if self.pings is not None and self._tick % 10 == 0:
            self.hb.poll(self.pings)
        self.hb.beat(now_ns)
        if self._tick % self._health_every == 0:
            self._publish_cell_health("run")

    def _publish_cell_health(self, state: str) -> None:
        m = self.cell.metrics
        self.pub.publish("health", {"node": "cell", "state": state, "counters": {
            k: getattr(m, k) for k in ("spawned", "picked", "correct", "wrong", "missed",
                                       "dropped")}, "gauges": {"sim_s": self.cell.t_ns / 1e9}})

    def run(self, seconds: float, wait_s: float = 30.0) -> dict:
        """Run the 1 kHz loop: frozen until the first action chunk (at most wait_s), then
        `seconds` of sim, or until stop() (e.g. from a signal handler)."""
        from rtinfer.transport.wire import now_ns
        self._seconds, self._wait_until_ns = seconds, now_ns() + int(wait_s * 1e9)
        with realtime_gc():
            self.node.run(None)
        self._publish_cell_health("stopped")  # the dashboard's last counts are the report's
        return self.report()

    def stop(self) -> None:
        self.node.state = "stopped"  # the loop ends after the current tick

    def report(self) -> dict:
        e2e = self.node.e2e.percentiles_us()
        return {"metrics": self.cell.metrics.as_dict(), "controller": dict(self.node.counters),
                "stack": dict(self.node.stack.counters), "obs_sent": self.obs_sent,
                "e2e_ms": {k: (v / 1e3 if k != "count" else v) for k, v in e2e.items()},
                "sim_s": self.cell.t_ns / 1e9,
                "task": {"seed": self.seed, "instruction": self.cell.instruction.tolist(),
                         "belt_speed": self.cell.cfg.belt_speed}}

    def close(self) -> None:
        for c in (self.trace, self.pub, self.sub, self.pings):
            if c is not None:
                c.close()


def parse_options(argv: list[str] | None = None
                  ) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The sim node's command line: (parser, parsed options)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--obs", required=True, help="endpoint to bind for obs/health/trace")
    ap.add_argument("--actions", required=True, help="the policy's action endpoint (connect)")
    ap.add_argument("--control", default=None, help="the monitor's command endpoint (connect)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=_seed, default=0, help="cell seed: spawns and, unless "
                    "--instruction is given, the class -> bin instruction")
    ap.add_argument("--instruction", type=_instruction, default=None,
                    help='the bin of each object class, e.g. 2,0,1; "seed" (default): drawn '
                         "from --seed")
    ap.add_argument("--belt-speed", type=_belt_speed, default=None,
                    help=f"m/s, in (0, {BELT_SPEED_MAX:g}] (default {CellConfig.belt_speed:g})")
    ap.add_argument("--cpu", type=int, default=None, help="pin the loop to this CPU")
    ap.add_argument("--deadline-ms", type=float, default=100.0)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--report", default=None, help="write the final report JSON here")
    add_curve_arguments(ap)
    return ap, ap.parse_args(argv)


def _option(parse):
    """An argparse type from one of the task's parsers (config.parse_*): its ValueError
    becomes a usage error with the same message."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert


_seed, _belt_speed = _option(parse_seed), _option(parse_belt_speed)
_instruction = _option(lambda text: None if text == "seed" else parse_instruction(text))


def make_sim(ap: argparse.ArgumentParser, a: argparse.Namespace) -> SimNode:
    """A SimNode from parse_options' result (a bad key setup is a usage error)."""
    curve = curve_from_args(ap, a, binds=[a.obs], connects=[a.actions, a.control])
    cell = CellConfig() if a.belt_speed is None else replace(CellConfig(), belt_speed=a.belt_speed)
    return SimNode(a.obs, a.actions, control_endpoint=a.control, cell=cell, seed=a.seed,
                   instruction=a.instruction, trace_path=a.trace, deadline_ms=a.deadline_ms, curve=curve)


def run_sim(sim: SimNode, seconds: float) -> dict:
    """Run until `seconds` or SIGTERM/SIGINT (stopping cleanly), close; the report."""
    def on_signal(*_):
        sim.signalled = True
        sim.stop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # stop cleanly and still write the report
        signal.signal(sig, on_signal)
    try:
        return sim.run(seconds)
    finally:
        sim.close()


def main(argv: list[str] | None = None) -> int:
    ap, a = parse_options(argv)
    configure_realtime(cpus=None if a.cpu is None else [a.cpu])
    sim = make_sim(ap, a)
    report = run_sim(sim, a.seconds)
    emit_report(report, a.report)
    return 0 if sim.signalled else never_followed(report["controller"])


def never_followed(counters: dict) -> int:
    """1, with one error line saying why, when a run ended without a single chunk followed
    (the cell stood still throughout); else 0."""
    if counters["chunks_accepted"]:
        return 0
    why = {k: v for k, v in counters.items() if k.startswith("rejected_") and v}
    print("sim: error: no action chunk was accepted in the whole run; "
          + (f"rejected: {why} (the controller's error lines above say why)" if why else
             "none arrived: is the policy running and connected to this robot's endpoints?"),
          file=sys.stderr, flush=True)
    return 1


def emit_report(report: dict, path: str | None) -> None:
    """Print the report as JSON, and write it to `path` when given."""
    text = json.dumps(report, indent=1)
    if path:
        with open(path, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
