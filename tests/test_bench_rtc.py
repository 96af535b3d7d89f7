"""`rtinfer bench rtc --quick` as real processes: the conveyor cell, the shipped token policy,
the delay proxy both ways at 100 ms (jittered: waypoints may be reordered): every arm drives
(chunks applied, switches measured), only rtc's chunks are conditioned, and nothing stale is
applied in any arm. Plus the join discontinuity's arithmetic on chunks made here."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rtinfer.bench.rtc_joins import join_jumps, spread

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000


def _chunk(capture, rows):
    return {
        "capture": capture,
        "start_ns": 50 * MS,
        "period_ns": 50 * MS,
        "values": np.array(rows, np.float64),
    }


def test_the_join_jump_is_taken_at_the_new_chunks_first_waypoint_ahead():
    old = _chunk(0, [[0.0, 0.0], [0.1, 0.0], [0.2, 0.0], [0.3, 0.0]])  # due 50, 100, 150, 200
    new = _chunk(60 * MS, [[0.2, 0.5], [0.3, 0.5], [0.3, 0.5], [0.3, 0.5]])  # 110, 160, ...
    pos, vel = join_jumps([(55 * MS, "a"), (105 * MS, "b")], {"a": old, "b": new}, 2)
    # at 110 ms: old is at 0.12 moving 2 m/s, new at 0.2 moving 2 m/s (x); y jumps 0.5
    assert np.allclose(pos, [[0.08, 0.5]]) and np.allclose(vel, [[0.0, 0.0]])
    pos, vel = join_jumps([(55 * MS, "a"), (230 * MS, "b")], {"a": old, "b": new}, 2)
    # at 260 ms: old holds its last waypoint at rest; new moves 0 at its end too
    assert np.allclose(pos, [[0.0, 0.5]]) and np.allclose(vel, [[0.0, 0.0]])
    assert spread(pos, ["x", "y"])["y"] == {"p50": 0.5, "p99": 0.5, "max": 0.5}
    assert spread(np.zeros((0, 2)), ["x", "y"]) == {"x": None, "y": None}


@pytest.mark.slow
def test_bench_rtc_quick_runs_every_arm_and_applies_nothing_stale():
    out = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "bench", "rtc", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["bench"] == "rtc" and len(result["loadavg"]) == 3
    assert [(p["arm"], p["delay_ms"]) for p in result["points"]] == [
        ("rtc", 100.0),
        ("none", 100.0),
        ("blend", 100.0),
    ]
    for p in result["points"]:
        assert p["stale_applied"] == 0  # a prefix mismatch (a reordered chunk) is counted
        assert p["chunks_accepted"] > 0 and p["switches"] > 0
        assert 0.0 <= p["success_rate"] <= 1.0 and p["correct"] <= p["resolved"]
        for key in ("jump_pos_m", "jump_vel_m_s"):
            assert set(p[key]) == {"x", "y", "z"}
            for s in p[key].values():
                assert 0 <= s["p50"] <= s["p99"] <= s["max"]
        assert (p["chunks_conditioned"] > 0) == (p["arm"] == "rtc")


def test_bench_rtc_lockstep_quick_is_load_free_and_applies_nothing_stale():
    """--lockstep --quick: the cell, controller and policy on one sim clock, 100 ms of delay
    in sim time: every arm drives, only rtc's chunks are conditioned, nothing stale."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "bench",
            "rtc",
            "--lockstep",
            "--quick",
            "--json",
            "--model",
            str(ROOT / "models/zoo/conveyor-flow"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["mode"] == "lockstep" and result["policy"] == "model"
    assert [p["arm"] for p in result["points"]] == ["rtc", "none", "blend"]
    for p in result["points"]:
        assert p["stale_applied"] == 0 and p["chunks_accepted"] > 0 and p["switches"] > 0
        assert (p["chunks_conditioned"] > 0) == (p["arm"] == "rtc")


def test_lockstep_replays_exactly_and_each_prefix_is_what_the_robot_executes(tmp_path):
    """Two lockstep runs of one seed agree to the bit; every conditioned chunk names the
    waypoints of the chunk in use due when its own waypoints 0..n-1 are (the alignment)."""
    from examples.conveyor_sorting import rtc_lockstep as ls

    model = str(ROOT / "models/zoo/conveyor-flow")
    seen = []
    keep = ls.DelayLine.recv

    def recv(self, timeout_ms=0):
        env = keep(self, timeout_ms)
        if env is not None and env.topic == "action_chunk":
            seen.append(env)
        return env

    ls.DelayLine.recv = recv
    try:
        a = ls.run_point(model, "rtc", 100.0, 3, seconds=2.0, jitter=0.2, tmp=tmp_path)
    finally:
        ls.DelayLine.recv = keep
    b = ls.run_point(model, "rtc", 100.0, 3, seconds=2.0, jitter=0.2, tmp=tmp_path)
    assert a == b and a["chunks_conditioned"] > 0 and a["prefix_mismatch"] == 0
    captures = {e.body["cycle"]: e.stamps["capture"] for e in seen}
    named = {
        (e.body["cycle"], e.stamps["capture"]): e.body["conditioned"]
        for e in seen
        if "conditioned" in e.body and e.body["conditioned"]["chunk"] in captures
    }
    assert named
    for (_, capture), c in named.items():  # old waypoint from+i is due with new waypoint i
        assert capture - captures[c["chunk"]] == c["from"] * 50 * MS


def test_the_joining_expert_conditions_on_the_prefix_and_its_chunks_start_with_it(tmp_path):
    """--expert --expert-joins: the scripted expert answers with chunks whose first waypoints
    are the committed prefix, the robot takes them as conditioned (no mismatch), and the
    expert that cannot condition (plain --expert) sends none."""
    import numpy as np

    from examples.conveyor_sorting import rtc_lockstep as ls
    from examples.conveyor_sorting.expert import JoiningExpert

    model = str(ROOT / "models/zoo/conveyor-flow")
    joined = ls.run_point(
        model, "rtc", 100.0, 3, seconds=2.0, jitter=0.2, tmp=tmp_path, expert="joins"
    )
    plain = ls.run_point(model, "rtc", 100.0, 3, seconds=2.0, jitter=0.2, tmp=tmp_path, expert=True)
    assert joined["chunks_conditioned"] > 0 and joined["prefix_mismatch"] == 0
    assert joined["stale_applied"] == 0 and plain["chunks_conditioned"] == 0
    policy = ls.ExpertPolicy(model, joins=True)
    assert isinstance(policy.expert, JoiningExpert) and policy.expert.predict
    prefix = np.array([[0.1, 0.0, 0.3, 0.0], [0.12, 0.0, 0.3, 0.0]])
    policy.expert.prefix = prefix
    obs = {
        "gantry": np.array([0.05, 0.0, 0.3, 0.4, 0.0, 0.0, 0.0, 0.0], np.float32),
        "objects": np.zeros((4, 4), np.float32),
        "held": np.array([-1]),
        "instruction": np.array([0, 1, 2]),
    }
    plan = policy.expert._plan(obs)
    assert (plan[:2] == prefix).all() and len(plan) == 16


def test_the_lockstep_delay_line_hands_a_message_over_its_delay_later_on_the_sim_clock():
    from examples.conveyor_sorting.delay_line import DelayLine, SimClock

    clock = SimClock()
    line = DelayLine("sim", clock, {"obs"}, 25 * MS)
    body = {"values": {"state": np.array([0.5, -0.5], np.float32)}, "ints": {}}
    assert line.publish("obs", body, {"capture": clock()})
    assert line.publish("health", {"node": "sim", "state": "run", "counters": {}, "gauges": {}})
    clock.now_ns += 25 * MS - 1
    assert line.recv() is None  # not yet
    clock.now_ns += 1
    env = line.recv()
    assert env.topic == "obs" and env.stamps["recv"] - env.stamps["capture"] == 25 * MS
    assert np.array_equal(env.body["values"]["state"], body["values"]["state"])
    assert line.recv() is None  # the other topic was not carried
