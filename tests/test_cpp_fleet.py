"""The C++ example controller follows a fleet move (docs/fleet.md, "A fleet on Ray"): its SUB
sockets connected to two real inference nodes (--actions EP1 EP2 --addressed), the robot
served by one (its robots file, as rtinfer.fleet's host actor writes it). Served by both for a
while (a partition's overlap), it takes one node's chunks and counts the other's; its node
killed (SIGKILL), it holds; written into the other node's robots file, it resumes from that
node. No chunk is ever applied past its deadline. No Ray: the moves are what a host actor
does."""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pytest
from cpp_client import ROOT, build, controller_cmd, conveyor_obs, start, stop

from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

DEADLINE_NS = 100_000_000  # the controller's default --deadline-ms
# The controller holds, and takes another node, after its node is silent for the deadline
# plus this: long enough that a busy machine never makes node a look gone while both serve.
CHUNK_INTERVAL_MS = 1000


@pytest.fixture(scope="module")
def release():
    return build("release")


def write(path, robots: dict) -> None:
    """Atomically, as the fleet's host actor does: write elsewhere, then rename."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(robots, f)
    os.replace(tmp, path)


class Robot:
    """The robot's observations (10 Hz, as the node answers them) and what its C++ controller
    publishes: applied traces [(capture, apply)] and health [(publish, state, counters)]."""

    def __init__(self, eps: dict) -> None:
        self.obs = Publisher(eps["obs"], "cpparm")
        self.watch = Subscriber(eps["robot"], ["trace", "health"])
        self.rng, self.applied, self.health = np.random.default_rng(0), [], []

    def run(self, until, seconds: float) -> bool:
        """Observe and listen until `until()` holds, at most `seconds`; whether it held."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not until():
            self.obs.publish("obs", conveyor_obs(self.rng), {"capture": now_ns()})
            t_next = time.monotonic() + 0.1
            while time.monotonic() < t_next:
                env = self.watch.recv(20)
                if env is None:
                    continue
                if env.topic == "health":
                    self.health.append(
                        (env.stamps["publish"], env.body["state"], env.body["counters"])
                    )
                elif "apply" in env.body["stamps"]:
                    st = env.body["stamps"]
                    self.applied.append((st["capture"], st["apply"]))
        return until()

    def applied_since(self, t_ns: int) -> list:
        return [a for a in self.applied if a[0] > t_ns]

    def counters(self) -> dict:
        """The controller's counters in its last health."""
        return self.health[-1][2] if self.health else {}

    def close(self) -> None:
        self.obs.close()
        self.watch.close()


def test_cpp_controller_holds_when_its_node_dies_and_resumes_from_the_node_it_moved_to(
    release, tmp_path
):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act-a", "act-b", "robot")}
    files = {n: tmp_path / f"robots-{n}.json" for n in ("a", "b")}
    write(files["a"], {"cpparm": eps["obs"]})
    nodes = {
        n: start(
            [
                sys.executable,
                "-m",
                "rtinfer.inference.node",
                "--model",
                str(ROOT / "models/zoo/conveyor-v1"),
                "--robots-file",
                str(files[n]),
                "--actions",
                eps[f"act-{n}"],
                "--name",
                f"policy-{n}",
                "--address-chunks",
                "--drafter",
                "none",
                "--no-budget",
                "--threads",
                "1",
                "--batch",
                "1",
            ]
        )
        for n in ("a", "b")
    }
    ctl = start(
        controller_cmd(
            release,
            [eps["act-a"], eps["act-b"]],
            eps["robot"],
            extra=["--addressed", "--chunk-interval-ms", str(CHUNK_INTERVAL_MS)],
        )
    )
    robot = Robot(eps)
    try:
        for proc in (*nodes.values(), ctl):
            line = proc.stdout.readline()
            assert "ready" in line, proc.stderr.read() if proc.poll() is not None else line
        assert robot.run(lambda: len(robot.applied) >= 5, 30), "node a never served the robot"
        write(files["b"], {"cpparm": eps["obs"]})  # b serves it too, for a while

        def taken(node: str) -> int:
            return robot.counters().get(f"chunks_from.policy-{node}", 0)

        def counted() -> int:
            return robot.counters().get("chunks_other_source", 0)

        assert robot.run(lambda: counted() >= 8, 15), "node b's chunks were not counted"
        both = robot.counters()  # a's stream taken, b's counted
        write(files["b"], {})  # taken off b: a serves it alone
        alone = taken("a") + 3
        assert robot.run(lambda: taken("a") >= alone, 10), "node a stopped serving the robot"
        nodes["a"].kill()  # SIGKILL: no goodbye; its last chunks may still be in flight
        nodes["a"].wait()
        kill_ns = now_ns()

        def held() -> bool:
            return any(t > kill_ns and s == "hold" for t, s, _ in robot.health)

        assert robot.run(held, 5 + CHUNK_INTERVAL_MS / 1e3), "the controller did not hold"
        robot.run(lambda: False, 0.5)  # held, and nothing fresh comes meanwhile
        move_ns = now_ns()
        assert robot.applied_since(kill_ns) == []
        write(files["b"], {"cpparm": eps["obs"]})  # the move: node b learns the robot
        assert robot.run(lambda: len(robot.applied_since(move_ns)) >= 5, 15), (
            "the controller never resumed from node b"
        )
    finally:
        out, err = stop(ctl)
        for proc in nodes.values():
            stop(proc)
        robot.close()
    assert ctl.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    c = report["counters"]
    stale = [(cap, app) for cap, app in robot.applied if app - cap > DEADLINE_NS]
    assert stale == [] and report["e2e_max_ms"] <= DEADLINE_NS / 1e6, stale
    assert c["holds"] >= 1 and c["rejected_bad"] == c["rejected_hash"] == c["rejected_dest"] == 0
    assert (both.get("chunks_from.policy-b", 0), both["source_switches"]) == (0, 0), both
    assert c["chunks_from.policy-b"] >= 5 and c["source_switches"] == 1, c  # after the move
    first = min(a for _, a in robot.applied_since(move_ns))
    print(
        f"applied {len(robot.applied)} cycles, 0 stale; first fresh chunk "
        f"{(first - move_ns) / 1e6:.0f} ms after the move; while both served: {both}; "
        f"at the end: {c}"
    )
