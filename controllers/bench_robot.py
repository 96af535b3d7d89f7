"""A bench robot for `rtinfer bench fleet`: replays recorded observations, checks chunks.

    python -m controllers.bench_robot --name r0 --obs ipc:///tmp/obs-r0 --actions ipc:///tmp/act \
        --model models/zoo/conveyor-v1 --stream models/zoo/conveyor-v1/obs_stream.npz --out r0.npz \
        [--curve-secret r0.key_secret --curve-map curve.json]

A real process on the bus, as a robot is, without physics or a 1 kHz loop (sixteen of those
would starve the node on two cores). It publishes the recorded obs bodies of --stream
(`values.<field>` / `ints.<field>` rows, from row --offset on, wrapping) at --rate-hz, each
stamped `capture` when it is sent, and hands every message it receives to a ControllerNode
(the robot's own acceptance rules: dest, spec hash, deadline, tokens vs values, assembly)
over a still HardwareInterface, ticked once per message. Per observation in the measured
window it records the stream row, the capture, the waypoints received and accepted for it,
the last one's recv stamp and the tokens.

Protocol with the bench: "ready" on stdout once the sockets are up; then one JSON line on
stdin, {"start_ns", "measure_ns", "end_ns"} (CLOCK_MONOTONIC): publish from start_ns (+ the
--phase-ms), record captures in [measure_ns, end_ns), keep receiving a deadline past end_ns,
write --out (.npz) and exit 0. SIGTERM moves end_ns to now: the run ends as it would have
then (the bench's phases ended early). Imports no inference package (robot-safe).

Across hosts (tcp): --curve-secret and --curve-map as every node takes them (controllers.run,
rtinfer.transport.curve): its obs endpoint is bound as a CURVE server, the policy's actions
endpoint connected as a client; a bad key setup is a usage error (exit 2) before any socket.

Several --actions (a fleet): its controller takes one node's chunks at a time
(controllers.one_source, counted in chunks_other_source and source_switches); the record
keeps only the waypoints it took, and each observation's record names the node that
answered it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

import numpy as np

from rtinfer.model.obs_stream import load_bodies
from rtinfer.realtime.deadline import DEADLINE_MS, deadline_ns
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.transport.wire import Envelope, now_ns

from .controller_config import ControllerConfig
from .hardware import Command, RobotState
from .node import ControllerNode
from .robot_files import load_policy_spec, load_robot


class StillRobot:
    """A HardwareInterface that never moves: the controller's checks run, physics does not."""

    def __init__(self, n: int) -> None:
        self.state = RobotState.zeros(n)

    def read(self) -> RobotState:
        return self.state

    def write(self, cmd: Command) -> None:
        pass


class OneMessage:
    """The Subscriber the ControllerNode reads: the one message handed to it, then nothing,
    so each tick's verdict belongs to one message."""

    def __init__(self) -> None:
        self.pending: Envelope | None = None

    def recv(self, timeout_ms: int = 0):
        env, self.pending = self.pending, None
        return env


class Record:
    """Per observation sent in the measured window: what came back for it."""

    def __init__(self, rows: int, horizon: int, dim: int) -> None:
        self.n = 0
        self.capture_ns = np.zeros(rows, np.int64)
        self.stream_index = np.zeros(rows, np.int32)
        self.count = np.zeros(rows, np.int32)  # waypoints the chunk announced
        self.received = np.zeros(rows, np.int32)
        self.accepted = np.zeros(rows, np.int32)
        self.last_recv_ns = np.zeros(rows, np.int64)
        self.tokens = np.full((rows, horizon, dim), -1, np.int32)
        self.source = np.full(rows, -1, np.int8)  # index into sources: who answered it
        self.sources: list[str] = []
        self.row_of: dict[int, int] = {}

    def sent(self, capture_ns: int, index: int) -> None:
        if self.n < len(self.capture_ns):
            self.capture_ns[self.n], self.stream_index[self.n] = capture_ns, index
            self.row_of[capture_ns] = self.n
            self.n += 1

    def waypoint(self, env, accepted: bool) -> None:
        row = self.row_of.get(env.stamps.get("capture"))
        if row is None:
            return  # answers an observation outside the window
        b = env.body
        if env.src not in self.sources:
            self.sources.append(env.src)
        self.source[row] = self.sources.index(env.src)
        self.count[row] = b["count"]
        self.received[row] += 1
        self.accepted[row] += accepted
        self.last_recv_ns[row] = max(self.last_recv_ns[row], env.stamps["recv"])
        if "tokens" in b and 0 <= b["index"] < self.tokens.shape[1]:
            self.tokens[row, b["index"]] = b["tokens"]

    def save(self, path: str, counters: dict) -> None:
        n = self.n
        np.savez(
            path,
            capture_ns=self.capture_ns[:n],
            stream_index=self.stream_index[:n],
            count=self.count[:n],
            received=self.received[:n],
            accepted=self.accepted[:n],
            last_recv_ns=self.last_recv_ns[:n],
            tokens=self.tokens[:n],
            source=self.source[:n],
            counters=np.array(json.dumps({**counters, "sources": self.sources})),
        )


def run(a: argparse.Namespace, curve=None) -> int:
    """The robot's loop (module doc); curve: the bus ``curve=`` of its sockets (None: none)."""
    tok, action = load_policy_spec(a.model)
    _, control, _ = load_robot(a.robot)
    period_ns = int(1e9 / a.rate_hz)
    cfg = ControllerConfig(
        control,
        tokenizer=tok,
        action=action,
        name=f"{a.name}-controller",
        deadline_ns=deadline_ns(a.deadline_ms),
        chunk_interval_ns=period_ns,
    )
    bodies = load_bodies(a.stream)
    pub = Publisher(a.obs, a.name, curve=curve)
    sub = Subscriber(
        a.actions,
        ["action_chunk", "command"],
        curve=curve,
        to={"action_chunk": a.name} if a.addressed else None,
    )
    feed = OneMessage()
    node = ControllerNode(StillRobot(control.n), cfg, feed, pub, robot=a.name, one_source=True)
    spec = action if action is not None else tok
    assert spec is not None  # ControllerConfig refuses neither
    print("ready", flush=True)
    times = json.loads(sys.stdin.readline())
    start, measure, end = times["start_ns"], times["measure_ns"], times["end_ns"]
    rec = Record(int((end - measure) / period_ns) + 2, spec.horizon, len(spec.names))
    next_ns, k = start + int(a.phase_ms * 1e6), 0
    stop_ns = end + deadline_ns(a.deadline_ms) + 200_000_000
    ended: list[int] = []  # SIGTERM's time: the run ends there
    signal.signal(signal.SIGTERM, lambda *_: ended.append(now_ns()))
    counters = node.counters
    while True:
        now = now_ns()
        if ended and ended[0] < end:
            end = max(ended[0], measure)
            stop_ns = end + deadline_ns(a.deadline_ms) + 200_000_000
        if now >= stop_ns:
            break
        if now >= next_ns and next_ns < end:
            index = (a.offset + k) % len(bodies)
            capture = now_ns()
            pub.publish("obs", bodies[index], {"capture": capture})
            if capture >= measure:
                rec.sent(capture, index)
            k += 1
            next_ns += period_ns
            continue
        wait_ns = (next_ns if next_ns < end else stop_ns) - now
        env = sub.recv(timeout_ms=min(-(-wait_ns // 1_000_000), 100))  # ceil: no spin
        if env is None:
            continue
        before, other = counters["waypoints_accepted"], counters["chunks_other_source"]
        feed.pending = env
        node.tick()
        if (
            env.topic == "action_chunk"
            and env.body.get("dest") == a.name
            and counters["chunks_other_source"] == other
        ):  # not another node's: taken
            rec.waypoint(env, counters["waypoints_accepted"] > before)
    rec.save(a.out, {**counters, "obs_sent": k, "actions": sub.legs})
    pub.close()
    sub.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m controllers.bench_robot", description=__doc__.split("\n")[0]
    )
    p.add_argument("--name", required=True, help="the robot's src (its chunks' dest)")
    p.add_argument("--obs", required=True, help="endpoint this robot binds for its obs")
    p.add_argument(
        "--actions",
        required=True,
        nargs="+",
        help="the policy node's actions endpoint (several: a fleet's nodes, with "
        "--addressed: it follows the chunks addressed to it from any of them)",
    )
    p.add_argument("--model", required=True, help="the policy's model directory (its spec)")
    p.add_argument(
        "--robot",
        default="examples.conveyor_sorting:robot.yaml",
        help="robot file (docs/robots.md) whose axes the chunks are checked on",
    )
    p.add_argument("--stream", required=True, help="recorded obs bodies (.npz)")
    p.add_argument("--offset", type=int, default=0, help="the stream row to start at")
    p.add_argument("--rate-hz", type=float, default=20.0)
    p.add_argument("--phase-ms", type=float, default=0.0, help="delay of the first obs")
    p.add_argument("--deadline-ms", type=float, default=DEADLINE_MS)
    p.add_argument("--out", required=True, help="the record (.npz) written at the end")
    p.add_argument(
        "--addressed",
        action="store_true",
        help="take only the chunks addressed to --name (a node run with "
        "--address-chunks): libzmq filters the other robots' at the node",
    )
    add_curve_arguments(p)
    a = p.parse_args(argv)
    return run(a, curve_from_args(p, a, binds=[a.obs], connects=a.actions))


if __name__ == "__main__":
    sys.exit(main())
