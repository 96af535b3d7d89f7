"""An overloaded host relieved, for real: two Ray nodes of a ray.cluster_utils.Cluster, each
an inference host (the real node process), three real robot processes (controllers.
bench_robot), r0 and r2 on h0, r1 on h1. h0's node is then made slow: its process is put in
a CPU cgroup that lets it run 20 ms per second (a neighbour taking the host's CPU), so its
cycles stall and its measured capacity falls below the two robots it serves. The controller
moves one of them (r2: the last by name) to h1 once h0's steady capacity has stayed below
its load for the hysteresis, and no other: h0 keeps r0, which it can serve alone. The robot
moved gets fresh chunks from h1, and no robot applies a stale chunk. The tiny model at a
500 ms policy period (a 400 ms admission window), so the healthy host fits three robots
however loaded the machine is. Needs root (the cgroup); Ray is shut down whatever happens."""

from __future__ import annotations

import dataclasses
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("ray")

from rtinfer.fleet.failover import robot_figures  # noqa: E402
from rtinfer.fleet.local import LocalFleet  # noqa: E402
from rtinfer.model.action_tokens import TokenizerConfig  # noqa: E402
from rtinfer.transport.wire import now_ns  # noqa: E402
from tests.test_fleet_hosts import ROBOT_FILE, obs_stream  # noqa: E402
from tests.test_fleet_ray import DEADLINE_MS, raylets  # noqa: E402

CPU = Path("/sys/fs/cgroup/cpu")


def why_no_cgroup() -> str | None:
    if os.geteuid() != 0 or not (CPU / "cgroup.procs").exists():
        return "needs root and the cgroup v1 cpu controller (/sys/fs/cgroup/cpu)"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240, method="thread"),
    pytest.mark.skipif(why_no_cgroup() is not None, reason=str(why_no_cgroup())),
]
PERIOD_NS = 500_000_000  # the policy's period: a 400 ms admission window


@contextmanager
def throttled(pid: int, run_us: int = 20_000, every_us: int = 1_000_000):
    """The process runs at most run_us of CPU time in each every_us (CFS bandwidth), until
    the block ends; then it is back in the root cgroup and the cgroup is gone."""
    group = CPU / f"rtinfer-test-slow-{pid}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text(str(every_us))
        (group / "cpu.cfs_quota_us").write_text(str(run_us))
        (group / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        for task in (group / "cgroup.procs").read_text().split():
            try:
                (CPU / "cgroup.procs").write_text(task)
            except OSError:  # it ended meanwhile
                pass
        group.rmdir()


def test_a_host_whose_node_stays_slow_is_relieved_of_one_robot(tiny_model_dir, tmp_path):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    tok = TokenizerConfig.load(model / "tokenizer.json")
    dataclasses.replace(tok, period_ns=PERIOD_NS).save(model / "tokenizer.json")
    robot_file = tmp_path / "robot.yaml"
    robot_file.write_text(ROBOT_FILE)
    before = raylets()
    with LocalFleet(
        str(model),
        hosts=2,
        robots=3,
        deadline_ms=DEADLINE_MS,
        stream=str(obs_stream(tmp_path / "obs_stream.npz")),
        robot_file=str(robot_file),
        node_args=("--threads", "1", "--batch", "1"),
        rate_hz=4.0,
    ) as fleet:
        st = fleet.wait(
            lambda s: (
                all(h["state"] == "up" for h in s["hosts"].values())
                and all(r["state"] == "placed" for r in s["robots"].values())
            )
        )
        assert {r: x["host"] for r, x in st["robots"].items()} == {
            "r0": "h0",
            "r1": "h1",
            "r2": "h0",
        }
        fleet.start_robots(seconds=30.0)
        fleet.wait(lambda s: all(h["cycles"] for h in s["hosts"].values()), timeout_s=30)
        assert fleet.status()["moves"] == 0  # a busy machine alone relieves nothing
        with throttled(fleet.status()["hosts"]["h0"]["pid"]):
            slow_ns = now_ns()
            st = fleet.wait(
                lambda s: [x["host"] for x in s["robots"].values()].count("h0") < 2,
                timeout_s=60,
                every_s=0.1,
            )
            moved_ns = now_ns()
            assert {r: x["host"] for r, x in st["robots"].items()} == {
                "r0": "h0",
                "r1": "h1",
                "r2": "h1",
            }
            relief = [t for _, t in st["events"] if "overloaded for" in t]
            assert relief and "relieving it of robot r2, to h1" in relief[0], st["events"]
            print(
                f"relieved {(moved_ns - slow_ns) / 1e9:.1f} s after h0's node was slowed: "
                f"{relief[0]}"
            )  # pytest -s shows it
            records = fleet.records()
            end = fleet.status()
    assert raylets() == before, "a raylet was left behind"
    assert end["moves"] == 1, end["events"]  # r2 once, and nothing else
    assert end["hosts"]["h0"]["steady_capacity"] is not None
    assert sum("overloaded for" in t for _, t in end["events"]) == 1
    for name, rec in records.items():
        assert robot_figures(rec, slow_ns, DEADLINE_MS, 500.0)["stale_applied"] == 0, name
    after = robot_figures(records["r2"], moved_ns, DEADLINE_MS, 500.0)
    assert after["first_fresh_ms"] is not None, f"r2 got no chunk from h1: {after}"
    assert robot_figures(records["r1"], moved_ns, DEADLINE_MS, 500.0)["first_fresh_ms"] is not None
