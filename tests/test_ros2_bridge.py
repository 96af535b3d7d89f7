"""The ROS 2 bridge end to end, in a network namespace: a plain rclpy arm (rtinfer_ros2.sim_arm)
driven by the shipped reach policy (a real inference node process) through the bridge
(python -m rtinfer_ros2). It reaches its target; with the policy killed it holds, and the arm
itself counts the commands that were not the hold: 0. With controller trajectory_chunk each
chunk is one JointTrajectory, and the arm's record of them shows none from a stale chunk."""

from __future__ import annotations

import json
import signal
import time

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="the ROS 2 venv (make test-ros2) runs this")
from rtinfer_ros2.arm_reach import tip  # noqa: E402
from tests.ros2_host import RosHost, available, read, stop, wait_for  # noqa: E402

if available():
    pytest.skip(available(), allow_module_level=True)

TARGET = (0.35, 0.0, 0.1)
POLICY = "models/zoo/arm-reach-bc"
# After the last chunk: the watchdog holds after one policy period + the deadline (150 ms),
# then the reference brakes to a stop (vel_limit / acc_limit = 200 ms); everything the arm is
# sent after that must be the hold.
SETTLED_S = 0.6
H, START_NS, PERIOD_NS = 10, 50_000_000, 50_000_000  # the policy's chunks (its action spec)
DEADLINE_NS, LEAD_NS = 100_000_000, 10_000_000  # the bridge's defaults
JTC = ["--set", "command=/arm/joint_trajectory_controller/joint_trajectory"]
CONTROLLERS = {  # the bridge's `controller`, and the sim arm's topic for it
    "forward": [],
    "trajectory": ["--set", "controller=trajectory", *JTC],
}


def start(host, tmp_path, *bridge_args):
    """The sim arm, the policy and the bridge (its options + bridge_args) in `host`."""
    obs, act = f"ipc://{tmp_path}/obs", f"ipc://{tmp_path}/act"
    arm = host.python(
        "-m",
        "rtinfer_ros2.sim_arm",
        "--report",
        str(tmp_path / "arm.json"),
        "--ros-args",
        "-r",
        "__ns:=/arm",
    )
    policy = host.python(
        "-m",
        "rtinfer.inference.node",
        "--model",
        POLICY,
        "--obs",
        obs,
        "--actions",
        act,
        "--name",
        "policy",
        "--seconds",
        "300",
    )
    bridge = host.python(
        "-m",
        "rtinfer_ros2",
        "--config",
        "rtinfer_ros2:arm.yaml",
        "--model",
        POLICY,
        "--obs",
        obs,
        "--actions",
        act,
        "--policy-hz",
        "20",
        "--seconds",
        "300",
        "--report",
        str(tmp_path / "bridge.json"),
        *bridge_args,
    )
    return arm, policy, bridge


@pytest.mark.parametrize("controller", list(CONTROLLERS))
def test_policy_drives_the_ros_arm_to_its_target_and_killed_leaves_it_holding(tmp_path, controller):
    arm_json, bridge_json = tmp_path / "arm.json", tmp_path / "bridge.json"
    with RosHost("rtros2b") as host:
        arm, policy, bridge = start(host, tmp_path, *CONTROLLERS[controller])
        try:

            def near():
                r = read(arm_json)
                return r and np.linalg.norm(tip(r["pos"]) - TARGET) < 0.02 and r

            reached = wait_for("the arm near its target", near)
            policy.send_signal(signal.SIGKILL)
            policy.wait(30)
            t_kill = time.monotonic_ns()
            # The ROS side has seen 2 s of commands after the kill.
            wait_for(
                "commands after the kill",
                lambda: (
                    (r := read(arm_json)) and sum(c[0] > t_kill + 2e9 for c in r["applied"]) > 0
                ),
            )
        finally:
            stop(policy, bridge, arm)
    r, report = read(arm_json), json.loads(bridge_json.read_text())
    assert len(reached["applied"]) > 20 and r["refused"] == 0
    after = [c[1:] for c in r["applied"] if c[0] > t_kill + SETTLED_S * 1e9]
    hold = after[-1]
    stale = sum(not np.allclose(c, hold, atol=1e-9) for c in after)
    assert len(after) >= 100 and stale == 0  # counted on the ROS side
    assert np.allclose(r["pos"], hold, atol=1e-3)  # and the arm is there, still
    assert np.linalg.norm(tip(hold) - TARGET) < 0.05
    ctl = report["controller"]
    assert ctl["chunks_accepted"] > 10 and ctl["holds"] >= 1
    assert report["ros2"]["commands"] > 100 and report["ros2"]["holds"] == ctl["holds"]
    print(
        "ros side: applied",
        len(r["applied"]),
        "after settle",
        len(after),
        "stale",
        stale,
        "| controller",
        {k: v for k, v in ctl.items() if "chunk" in k or "hold" in k},
    )


def test_each_chunk_is_one_trajectory_never_stale_and_killed_the_arm_holds(tmp_path):
    arm_json, bridge_json = tmp_path / "arm.json", tmp_path / "bridge.json"
    with RosHost("rtros2c") as host:
        arm, policy, bridge = start(host, tmp_path, "--set", "controller=trajectory_chunk", *JTC)
        try:
            wait_for(
                "the arm near its target",
                lambda: (r := read(arm_json)) and np.linalg.norm(tip(r["pos"]) - TARGET) < 0.02,
            )
            policy.send_signal(signal.SIGKILL)
            policy.wait(30)
            t_kill = time.monotonic_ns()
            time.sleep(2.0)  # the watchdog holds 150 ms after the last chunk; the arm settles
            last = read(arm_json)
        finally:
            stop(policy, bridge, arm)
    report = json.loads(bridge_json.read_text())
    ctl, ros2 = report["controller"], report["ros2"]
    trajectories = last["trajectories"]
    assert last["refused"] == 0
    # Counted on the ROS side, from each trajectory alone ([receipt, first due, stamp,
    # points]): the observation behind it (its last point is the chunk's last waypoint, due
    # START + (H - 1) periods after the capture) was within the deadline when it was stamped,
    # and its first point was still at least the lead ahead: nothing stale was sent.
    chunks = [t for t in trajectories if t[3] > 1]
    last_due = [t[1] + (t[3] - 1) * PERIOD_NS for t in chunks]
    captured = [d - START_NS - (H - 1) * PERIOD_NS for d in last_due]
    assert len(chunks) > 10 and len(chunks) == ros2["trajectories"] <= ctl["chunks_accepted"]
    assert max(t[2] - c for t, c in zip(chunks, captured)) <= DEADLINE_NS
    assert min(t[1] - t[2] for t in chunks) >= LEAD_NS
    # Killed: the last thing the arm got is a hold, one point (sent after the kill, or before
    # it when a busy host had the watchdog hold already), nothing but holds once the watchdog
    # has had its time, and the arm is there, still.
    hold = last["applied"][-1]
    assert trajectories[-1][3] == 1 and len(last["applied"]) == len(trajectories)
    assert trajectories[-1][1] > trajectories[-1][0]  # due after it came (stamp 0: on receipt)
    settled = [t for a, t in zip(last["applied"], trajectories) if a[0] > t_kill + SETTLED_S * 1e9]
    assert all(t[3] == 1 for t in settled), settled
    assert np.allclose(last["pos"], hold[1:], atol=1e-3)
    assert np.linalg.norm(tip(hold[1:]) - TARGET) < 0.05
    assert ros2["holds"] == ctl["holds"] >= 1
    # Past due on arrival (the arm's stale_trajectories): the DDS delivery and the arm's own
    # executor took longer than the first point's lead; a figure, as the time on the way is.
    transit_ms = sorted((t[0] - t[2]) / 1e6 for t in chunks)
    print(
        "ros side:",
        len(trajectories),
        "trajectories,",
        last["stale_trajectories"],
        "past due on arrival; transit ms p50/max",
        transit_ms[len(transit_ms) // 2],
        transit_ms[-1],
        {k: v for k, v in ros2.items() if k.startswith(("traj", "hold"))},
    )


def test_stale_chunks_never_reach_the_ros_arm(tmp_path):
    """A deadline no chunk can meet (1 ms): every chunk is rejected as stale, and the arm is
    only ever sent its hold (its start pose), counted on the arm's side."""
    arm_json, bridge_json = tmp_path / "arm.json", tmp_path / "bridge.json"
    with RosHost("rtros2t") as host:
        arm, policy, bridge = start(host, tmp_path, "--deadline-ms", "1")
        try:
            wait_for("2 s of commands", lambda: (r := read(arm_json)) and len(r["applied"]) > 200)
        finally:
            stop(policy, bridge, arm)
    r, ctl = read(arm_json), json.loads(bridge_json.read_text())["controller"]
    start_pose = r["applied"][0][1:]
    moved = sum(not np.allclose(c[1:], start_pose, atol=1e-9) for c in r["applied"])
    assert moved == 0 and np.allclose(r["pos"], start_pose, atol=1e-6)
    assert ctl["chunks_accepted"] == 0 and ctl["rejected_stale"] > 20
