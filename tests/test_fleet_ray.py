"""Failover on Ray (issue 33): two Ray nodes of a ray.cluster_utils.Cluster, each an
inference host (the real node process, owned by its host actor), two real robot processes
(controllers.bench_robot) following the chunks addressed to them from either host, over tcp
with CURVE (a key per host and robot; a robot's key on its host's allow-list only). The Ray
node of one host is removed mid-run: its robot is placed on the survivor, which learns it
from its robots file and its key from its allow-list, and both robots get fresh chunks from
the survivor, with no stale chunk applied. Then r0 is revoked (its key deleted where the
controller runs): no host holds its key and it is served no more. Then the controller actor is killed: Ray
restarts it, it rebuilds its table from the surviving host, and nothing moves. The tiny model at a 250 ms policy period, so that the survivor's admission fits both
robots however loaded the machine is (its window is 0.8 x min(deadline, period)). Ray is
shut down and no raylet is left, whatever happens."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess

import pytest

pytest.importorskip("ray")

import ray  # noqa: E402

from rtinfer.fleet.controller import CONTROLLER, NAMESPACE  # noqa: E402
from rtinfer.fleet.failover import robot_figures  # noqa: E402
from rtinfer.fleet.local import LocalFleet  # noqa: E402
from rtinfer.model.action_tokens import TokenizerConfig  # noqa: E402
from rtinfer.transport.wire import now_ns  # noqa: E402
from tests.test_fleet_hosts import ROBOT_FILE, obs_stream  # noqa: E402

# thread: a hang inside Ray (a C++ wait) still ends, with every thread's stack
pytestmark = pytest.mark.timeout(240, method="thread")
DEADLINE_MS = 1000.0  # the robots' deadline: wide, so a busy machine is no failover
PERIOD_NS = 250_000_000  # the policy's period: the robots send at 10 Hz (not a flood)


def slow_model(tiny_model_dir, tmp_path):
    """The tiny model with a 250 ms policy period (its tokenizer's, hash and all)."""
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    tok = TokenizerConfig.load(model / "tokenizer.json")
    dataclasses.replace(tok, period_ns=PERIOD_NS).save(model / "tokenizer.json")
    return model


def raylets() -> list[str]:
    return subprocess.run(["pgrep", "-f", "raylet"], capture_output=True, text=True).stdout.split()


@pytest.fixture(scope="module")
def fleet(tiny_model_dir, tmp_path_factory):
    """One fleet for the module (a Ray cluster takes ~20 s to start on a busy machine): the
    controller test first, then the failover test, which ends the hosts' story."""
    tmp_path = tmp_path_factory.mktemp("fleet_ray")
    robot_file = tmp_path / "robot.yaml"
    robot_file.write_text(ROBOT_FILE)
    before = raylets()
    model = slow_model(tiny_model_dir, tmp_path)
    with LocalFleet(
        str(model),
        hosts=2,
        robots=2,
        deadline_ms=DEADLINE_MS,
        stream=str(obs_stream(tmp_path / "obs_stream.npz")),
        robot_file=str(robot_file),
        node_args=("--threads", "1", "--batch", "1"),
        rate_hz=10.0,
        curve=True,
    ) as f:
        yield f
    assert raylets() == before, "a raylet was left behind"


def both_up(st: dict) -> bool:
    return all(h["state"] == "up" for h in st["hosts"].values()) and all(
        r["state"] == "placed" for r in st["robots"].values()
    )


def test_every_host_s_node_runs_at_niceness_0_not_ray_s_15(fleet):
    """A node is a child of its host's actor, a Ray worker (niceness 15 by Ray's default):
    niced, a CPU-bound neighbour starved nodes' start past 120 s. The fleet's clusters run
    their workers at 0, and the host starts its node at 0."""
    st = fleet.wait(both_up)
    last = {}  # host -> its latest up line (a node started again has a later one)
    for _, t in st["events"]:
        if m := re.match(r"host (h\d) up ", t):
            last[m.group(1)] = t
    assert set(last) == {"h0", "h1"} and not any("niceness" in t for t in last.values()), last
    for t in last.values():
        pid = int(re.search(r"node pid (\d+)", t).group(1))
        assert os.getpriority(os.PRIO_PROCESS, pid) == 0, t


def test_a_restarted_controller_rebuilds_its_table_and_moves_nothing(fleet):
    fleet.wait(both_up)
    placed = {r: x["host"] for r, x in fleet.status()["robots"].items()}
    ray.kill(ray.get_actor(CONTROLLER, namespace=NAMESPACE), no_restart=False)
    st = fleet.wait(lambda s: any("rebuilt" in t for _, t in s["events"]), timeout_s=60)
    assert {r: x["host"] for r, x in st["robots"].items()} == placed
    assert st["moves"] == 0 and all(h["state"] == "up" for h in st["hosts"].values())


def test_a_lost_host_s_robot_moves_to_the_survivor_and_a_revoked_one_is_served_by_none(fleet):
    st = fleet.wait(both_up)
    assert {r["host"] for r in st["robots"].values()} == {"h0", "h1"}  # each its own host
    fleet.start_robots(seconds=12.0)
    fleet.wait(lambda s: all(h["cycles"] for h in s["hosts"].values()), timeout_s=30)
    kill_ns = fleet.kill_host("h1")
    st = fleet.wait(lambda s: s["robots"]["r1"]["host"] == "h0", timeout_s=30, every_s=0.1)
    # its node died first: the controller may already be starting it again, pending on a
    # Ray node that is gone (it starts if the host comes back)
    assert st["hosts"]["h1"]["state"] in ("down", "starting") and st["moves"] == 1
    assert st["robots"]["r0"]["host"] == "h0"  # the survivor's own robot stayed
    allow = sorted(p.name for p in (fleet.run_dir / "h0" / "allow").glob("r*.key"))
    assert allow == ["r0.key", "r1.key"]  # the survivor holds both robots' keys
    revoke_ns = now_ns()  # revoke r0: delete its key where the controller runs
    (fleet.run_dir / "keys" / "r0.key").unlink()
    st = fleet.wait(lambda s: s["robots"]["r0"]["state"] == "revoked", timeout_s=30)
    assert sorted(p.name for p in (fleet.run_dir / "h0" / "allow").glob("r*.key")) == ["r1.key"]
    off_ns = now_ns()  # the key is off h0's files now: its node reads them within 100 ms
    records = fleet.records()
    served = records["r0"]["capture_ns"][records["r0"]["accepted"] > 0]
    assert not (served > off_ns + 2_000_000_000).any(), "a revoked robot was served"
    r1 = records["r1"]["capture_ns"][records["r1"]["accepted"] > 0]
    assert (r1 > revoke_ns + 2_000_000_000).any(), "r1 was not served after r0's revocation"
    for name, rec in records.items():
        f = robot_figures(rec, kill_ns, DEADLINE_MS, 100.0)
        assert f["first_fresh_ms"] is not None, f"{name} got no chunk after the kill: {f}"
        assert f["stale_applied"] == 0, name
        assert rec["counters"]["chunks_accepted"] > 0
    assert any("h1 lost" in text for _, text in st["events"])
