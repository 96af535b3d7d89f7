"""A network partition between the fleet controller and a host, for real, and a host that
joins taking a robot back (issue 33). Each host is a network namespace running its own Ray
node (rtinfer.fleet.lan, `ray start` there), the robots another, tcp + CURVE between them.
Host h1 is cut off the head (blackhole routes on both sides; the bridge still carries robot
traffic): Ray marks it dead and the controller moves r1 to h0 without being able to take
r1's key off h1, so both nodes serve r1. The robot follows one node (bench_robot's
OneSource: the one it had) and counts the other's chunks, applying none; r0 is untouched.
Healed, Ray ends h1's raylet and with it its node: r1 switches to h0. h1's Ray node is
started again: the controller starts its node and balances, moving r1 back to h1 once
r1's minute since its last move is over (no robot moves more than once a minute). No
stale chunk is applied, no robot goes unserved through any of it, and at the end each
key is on one allow-list. The tiny model at a 250 ms period, deadline 1 s (a busy machine
is no failover). ~2.5 min: marked slow (`make test-slow`)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ray")

from rtinfer.fleet.failover import robot_figures  # noqa: E402
from rtinfer.fleet.lan import why_not  # noqa: E402
from rtinfer.fleet.local import LocalFleet  # noqa: E402
from rtinfer.transport.wire import now_ns  # noqa: E402
from tests.test_fleet_hosts import ROBOT_FILE, obs_stream  # noqa: E402
from tests.test_fleet_ray import DEADLINE_MS, raylets, slow_model  # noqa: E402

# In `make test-slow` since 2026-12-03. It was opt-in: two runs failed because the bench
# robot had lost its one-source rule (fixed), one on a 4.3 s gap in r1's applied chunks (most
# likely libzmq's use-after-free that ended a robot's stream at a refused endpoint's retry:
# rtinfer.transport.bus.peers, fixed), and one because h1 came back within 3 s of going,
# leaving no window to check r1 on h0 (the test now waits 4 s before h1 joins again).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420, method="thread"),
    pytest.mark.skipif(why_not() is not None, reason=str(why_not())),
]
SECONDS = 100.0  # the robots' run: a partition, a heal, a Ray node started again, and
# r1's minute since its move (balance moves it back only then)


def served_by(rec: dict, after_ns: int, before_ns: int) -> set[str]:
    """The nodes whose chunks the robot applied for observations captured in the window."""
    rows = (rec["accepted"] > 0) & (rec["capture_ns"] > after_ns) & (rec["capture_ns"] < before_ns)
    names = rec["counters"]["sources"]
    return {names[i] for i in rec["source"][rows]}


def test_a_partitioned_host_keeps_serving_and_a_host_that_joins_takes_a_robot_back(
    tiny_model_dir, tmp_path
):
    robot_file = tmp_path / "robot.yaml"
    robot_file.write_text(ROBOT_FILE)
    before = raylets()
    with LocalFleet(
        str(slow_model(tiny_model_dir, tmp_path)),
        hosts=2,
        robots=2,
        deadline_ms=DEADLINE_MS,
        stream=str(obs_stream(tmp_path / "obs.npz")),
        robot_file=str(robot_file),
        rate_hz=10.0,
        curve=True,
        netns=True,
        node_args=("--threads", "1", "--batch", "1"),
    ) as fleet:
        st = fleet.wait(
            lambda s: (
                all(h["state"] == "up" for h in s["hosts"].values())
                and all(r["state"] == "placed" for r in s["robots"].values())
            )
        )
        assert {r: x["host"] for r, x in st["robots"].items()} == {"r0": "h0", "r1": "h1"}
        end_ns = fleet.start_robots(seconds=SECONDS) + int(SECONDS * 1e9)
        fleet.wait(lambda s: all(h["cycles"] for h in s["hosts"].values()), timeout_s=30)
        cut_ns = fleet.partition("h1", True)
        st = fleet.wait(lambda s: s["robots"]["r1"]["host"] == "h0", timeout_s=30, every_s=0.1)
        moved_ns = now_ns()
        assert st["hosts"]["h1"]["state"] != "up"  # lost, as far as the controller knows
        # the controller could not reach h1: r1's key is on both hosts' allow-lists now
        allow = {
            h: sorted(p.name for p in (fleet.run_dir / h / "allow").glob("r*.key"))
            for h in ("h0", "h1")
        }
        assert allow == {"h0": ["r0.key", "r1.key"], "h1": ["r1.key"]}
        time.sleep(4.0)  # both nodes serve r1
        heal_ns = fleet.partition("h1", False)
        end = time.monotonic() + 60  # Ray ends the raylet it marked dead, and h1 with it
        while fleet.lan.pids("h1") and time.monotonic() < end:
            time.sleep(0.2)
        assert fleet.lan.pids("h1") == [], "h1 lived on after the heal"
        gone_ns = now_ns()
        time.sleep(4.0)  # r1 switches to h0 (h1 silent for a chunk interval and the deadline)
        fleet.add_host("h1")  # h1 joins again: it takes r1 back (the fleet balances,
        # once r1's minute since its move is over)
        st = fleet.wait(lambda s: s["robots"]["r1"]["host"] == "h1", timeout_s=120, every_s=0.1)
        back_ns = now_ns()
        assert back_ns - moved_ns > 55e9, "r1 moved twice within a minute"
        assert {r: x["host"] for r, x in st["robots"].items()} == {"r0": "h0", "r1": "h1"}
        allow = {
            h: sorted(p.name for p in (fleet.run_dir / h / "allow").glob("r*.key"))
            for h in ("h0", "h1")
        }
        assert allow == {"h0": ["r0.key"], "h1": ["r1.key"]}  # one allow-list each again
        assert back_ns + 5_000_000_000 < end_ns, "the robots' run ended before r1 was back"
        records = fleet.records(timeout_s=120)
        events = [text for _, text in fleet.status()["events"]][-12:]
    assert raylets() == before, "a raylet was left behind"
    r0, r1 = records["r0"], records["r1"]
    for name, rec in records.items():
        assert robot_figures(rec, cut_ns, DEADLINE_MS, 100.0)["stale_applied"] == 0, name
    # r0 never moved nor missed a beat: h0 served it throughout, and only h0
    assert served_by(r0, 0, end_ns) == {"policy-h0"}
    assert r0["counters"]["source_switches"] == 0
    # partitioned, h1 kept serving r1 and r1 took h1's chunks, counting h0's. (On a busy
    # machine h1 may fall silent past the robot's quiet time, a chunk interval and the
    # deadline, and r1 then switches to h0 by the rule: one CI run did. So h1's chunks were
    # taken, not h1's only, and the switches are at least the two below.)
    assert "policy-h1" in served_by(r1, moved_ns + 1_000_000_000, heal_ns)
    assert r1["counters"]["chunks_other_source"] > 0
    # h1 gone, r1 took h0's; h1 back, r1 took h1's again (h0's last chunk may still come
    # first: h0 lets go before h1 takes it): one stream at a time, two switches
    assert served_by(r1, gone_ns + 2_000_000_000, back_ns - 1_000_000_000) == {"policy-h0"}
    after = (r1["capture_ns"] > back_ns) & (r1["accepted"] > 0)
    last = r1["counters"]["sources"][r1["source"][after][-1]] if after.any() else None
    assert last == "policy-h1" and served_by(r1, back_ns, end_ns) <= {"policy-h0", "policy-h1"}, (
        events,
        r1["counters"],
        r1["source"][after].tolist(),
    )
    assert r1["counters"]["source_switches"] >= 2
    # nothing lost: every second of the run, each robot applied a fresh chunk
    marks = {"cut": cut_ns, "moved": moved_ns, "heal": heal_ns, "gone": gone_ns, "back": back_ns}
    for name, rec in records.items():
        accepted = np.sort(rec["capture_ns"][rec["accepted"] > 0])
        gaps_s = np.diff(accepted) / 1e9
        i = int(gaps_s.argmax())
        where = {k: round((accepted[i] - t) / 1e9, 2) for k, t in marks.items()}
        assert gaps_s.max() < 3.0 + DEADLINE_MS / 1e3, (
            name,
            float(gaps_s.max()),
            "the gap began this long after each mark (s):",
            where,
            rec["counters"],
            events,
        )
