"""Partition and delay between an inference host and a robot host: two network namespaces
joined by a veth pair (tests.faults.netns), tcp:// with CURVE, the fault proxy in the action path.

    host a "gpu"   10.231.0.1: expert policy node, binds actions tcp://10.231.0.1:5556
    host b "robot" 10.231.0.2: SimNode (instrumented), binds obs tcp://10.231.0.2:5555;
                   its actions go through tests.faults.faultproxy at 127.0.0.1:6000 -> a:5556

Needs root and `ip`; skips with the reason otherwise. The namespaces are removed afterwards.
The CLOCK_MONOTONIC clock is not namespaced, so this process's fault times and the robot's
transition times are on one clock.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from rtinfer.transport import curve
from rtinfer.transport.wire import now_ns
from tests.faults import netns
from tests.faults.common import LONG, PY, ROOT, stop, wait_for

why = netns.available()
pytestmark = [pytest.mark.skipif(why is not None, reason=f"netns: {why}"), pytest.mark.timeout(240)]

A, B = netns.ADDRS["a"], netns.ADDRS["b"]
OBS, ACTIONS, PROXIED = f"tcp://{B}:5555", f"tcp://{A}:5556", "tcp://127.0.0.1:6000"
DEADLINE_MS = 100.0
# the controller holds after the sim's 50 ms chunk interval + the deadline without a fresh chunk
QUIET_MS = DEADLINE_MS + 50.0


def make_keys(d: Path) -> dict:
    """gpu + robot (+ monitor) key pairs; each side's allow-list holds the other's key."""
    paths = {n: curve.generate(d / "keys", n) for n in ("gpu", "robot", "monitor")}
    allow = d / "keys" / "clients"
    allow.mkdir()
    for pub, _ in paths.values():
        shutil.copy(pub, allow)
    return {"paths": paths, "allow": str(allow)}


@pytest.fixture
def hosts():
    hp = netns.HostPair("rtf").create()
    try:
        yield hp
    finally:
        hp.remove()


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
def test_delay_and_cut_are_held_once_a_chunk_is_overdue_and_stale_chunks_never_applied(hosts):
    d = Path(tempfile.mkdtemp(prefix="rtf-net-"))
    k = make_keys(d)
    p = k["paths"]
    cmap = {
        OBS: {"allow": k["allow"]},
        ACTIONS: {"allow": k["allow"]},
        PROXIED: {"server_key": str(p["gpu"][0])},
    }
    (d / "curve.json").write_text(
        json.dumps({**cmap, OBS: {"allow": k["allow"], "server_key": str(p["robot"][0])}})
    )
    curve = ["--curve-map", str(d / "curve.json")]
    out, ready = d / "robot.json", d / "ready"
    proxy = hosts.popen(
        "b",
        [
            PY,
            "-m",
            "tests.faults.faultproxy",
            "--listen",
            "127.0.0.1:6000",
            "--target",
            f"{A}:5556",
            "--lifetime-s",
            "200",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout.readline().startswith("listening")
    policy = hosts.popen(
        "a",
        [
            PY,
            "-m",
            "examples.conveyor_sorting.expert_node",
            "--curve-secret",
            str(p["gpu"][1]),
            *curve,
            "--obs",
            OBS,
            "--actions",
            ACTIONS,
        ],
        cwd=ROOT,
    )
    robot = hosts.popen(
        "b",
        [
            PY,
            "-m",
            "tests.faults.harness",
            "--obs",
            OBS,
            "--actions",
            PROXIED,
            "--seconds",
            "600",
            "--out",
            str(out),
            "--ready",
            str(ready),
            "--curve-secret",
            str(p["robot"][1]),
            *curve,
        ],
        cwd=ROOT,
    )
    events = {}

    def say(cmd: str) -> None:
        proxy.stdin.write(cmd + "\n")
        proxy.stdin.flush()
        assert proxy.stdout.readline().startswith("ok")

    hold_s = 3.0 if LONG else 1.5
    try:
        assert wait_for(ready.exists, 90), "the robot never got a chunk across the namespaces"
        time.sleep(hold_s)
        say("delay 40"), say("jitter 30")  # within the deadline: tracked as usual
        events["jitter"] = now_ns()
        time.sleep(hold_s)
        say("jitter 0"), say("delay 150")  # every chunk older than the deadline
        events["delay"] = now_ns()
        time.sleep(hold_s)
        say("delay 0")
        events["heal_delay"] = now_ns()
        time.sleep(hold_s + 1.0)
        hosts.link(False)  # full partition
        events["cut"] = now_ns()
        time.sleep(hold_s)
        hosts.link(True)
        events["heal_cut"] = now_ns()
        assert wait_for(lambda: False, 4.0 if LONG else 3.0) is False
    finally:
        stop(robot, 30)
        stop(policy)
        proxy.stdin.close()
        stop(proxy)
    r = json.loads(out.read_text())
    holds, resumes = r["holds"], r["resumes"]
    gap = r["max_tick_gap_ms"]

    def first(items, after, key=lambda x: x):
        return next((key(x) for x in items if key(x) >= after), None)

    delay_hold = first(holds, events["delay"], key=lambda h: h["at_ns"])
    cut_hold = first(holds, events["cut"], key=lambda h: h["at_ns"])
    figures = {
        "rejected_stale": r["counters"]["rejected_stale"],
        "holds": len(holds),
        "e2e_max_ms": r["e2e_max_ms"],
        "max_tick_gap_ms": gap,
        "fresh_to_hold_ms": [h["after_fresh_ms"] for h in holds],
        "delay_to_hold_ms": delay_hold and (delay_hold - events["delay"]) / 1e6,
        "cut_to_hold_ms": cut_hold and (cut_hold - events["cut"]) / 1e6,
        "heal_delay_to_resume_ms": (first(resumes, events["heal_delay"]) - events["heal_delay"])
        / 1e6
        if first(resumes, events["heal_delay"])
        else None,
        "heal_cut_to_resume_ms": (first(resumes, events["heal_cut"]) - events["heal_cut"]) / 1e6
        if first(resumes, events["heal_cut"])
        else None,
        "force_over_limit": r["force_over_limit"],
        "metrics": r["metrics"],
        "sub": r["sub"],
    }
    print("partition figures:", json.dumps(figures))
    assert r["counters"]["rejected_stale"] > 0  # the delayed chunks arrived and were refused
    assert r["e2e_max_ms"] <= DEADLINE_MS + gap + 1.0  # and none stale was ever applied
    assert delay_hold is not None and delay_hold < events["heal_delay"]
    assert cut_hold is not None and cut_hold < events["heal_cut"]
    for h in holds:  # every hold: the first tick after interval + deadline without a fresh chunk
        assert QUIET_MS < h["after_fresh_ms"] <= QUIET_MS + gap + 1.0, h
    assert figures["heal_delay_to_resume_ms"] is not None, "no resume after the delay healed"
    assert figures["heal_cut_to_resume_ms"] is not None, "no resume after the link came back"
    assert r["force_over_limit"] == 0


DEMO = """\
name: netdemo
deadline_ms: 100
seconds: {seconds}
hosts: {{robot: {{address: {b}}}, gpu: {{address: {a}}}}}
endpoints:
  obs: {{url: "tcp://{b}:5555", server_key: {k}/robot.key, allow: {k}/clients}}
  actions: {{url: "tcp://{a}:5556", server_key: {k}/gpu.key, allow: {k}/clients}}
  control: {{url: "tcp://{b}:5557", server_key: {k}/monitor.key, allow: {k}/clients}}
nodes:
  - name: sim
    host: robot
    entry: controllers.run:main
    args: [--curve-secret, "${{node.curve_secret}}", --curve-map, "${{curve_map}}",
           --hardware, "examples.conveyor_sorting.sim_node:ConveyorSim",
           --config, "examples.conveyor_sorting:robot.yaml",
           --model, "examples.conveyor_sorting:tokenizer.json",
           --obs, "${{endpoints.obs}}", --actions, "${{endpoints.actions}}",
           --control, "${{endpoints.control}}", --set, "seconds=${{seconds}}",
           --report, "${{run_dir}}/sim_report.json"]
    curve_secret: {k}/robot.key_secret
  - name: monitor
    host: robot
    entry: rtinfer.monitor.node:main
    args: [--curve-secret, "${{node.curve_secret}}", --curve-map, "${{curve_map}}",
           --listen, "${{endpoints.obs}}", "${{endpoints.actions}}",
           --control, "${{endpoints.control}}", --deadline-ms, "${{deadline_ms}}",
           --report, "${{run_dir}}/monitor_report.json", --config, "${{monitor_config}}"]
    curve_secret: {k}/monitor.key_secret
    required: false
    restart: on-failure
  - name: policy
    host: gpu
    entry: examples.conveyor_sorting.expert_node:main
    args: [--curve-secret, "${{node.curve_secret}}", --curve-map, "${{curve_map}}",
           --obs, "${{endpoints.obs}}", --actions, "${{endpoints.actions}}"]
    curve_secret: {k}/gpu.key_secret
monitor: {{policy_node: policy, required: [], window: 50, hold_after_misses: 5}}
"""


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
def test_expert_demo_runs_across_two_hosts_over_tcp_with_curve(hosts):
    d = Path(tempfile.mkdtemp(prefix="rtf-demo-"))
    make_keys(d)
    seconds = 30 if LONG else 10
    f = d / "netdemo.yaml"
    f.write_text(DEMO.format(seconds=seconds, a=A, b=B, k=d / "keys"))
    cmd = [PY, "-m", "rtinfer.launch.supervisor", str(f), "--run-dir"]
    gpu = hosts.popen(
        "a",
        cmd + [str(d / "gpu"), "--host", "gpu"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    robot = hosts.popen(
        "b",
        cmd + [str(d / "robot"), "--host", "robot"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        rc = robot.wait(seconds + 90)
    finally:
        stop(robot)
        stop(gpu)
    sim = json.loads((d / "robot" / "sim_report.json").read_text())
    mon = json.loads((d / "robot" / "monitor_report.json").read_text())
    print(
        "two-host demo:",
        json.dumps(
            {
                "metrics": sim["metrics"],
                "controller": sim["controller"],
                "monitor_cycles": mon.get("cycles"),
                "misses": mon.get("misses"),
                "e2e_ms": sim["e2e_ms"],
            }
        ),
    )
    assert rc == 0
    assert sim["controller"]["chunks_accepted"] > 0
    assert sim["metrics"]["correct"] >= 1, sim["metrics"]  # objects got sorted
    assert mon.get("cycles", 0) > 0  # the monitor heard the robot's traces over CURVE too
