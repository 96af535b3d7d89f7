"""CURVE from the command line: `--curve-secret/--curve-map` on the product nodes, one
server key per endpoint in the bus, and launch/two_hosts.yaml run as two launchers (robot,
gpu) on 127.0.0.1 over tcp with CURVE, the scripted expert standing in for the policy."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rtinfer.launch.file import load
from rtinfer.transport import curve
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import CurveConfig, CurveSetupError, curve_configs, curve_for

ROOT = Path(__file__).resolve().parents[1]
TWO_HOSTS = ROOT / "launch" / "two_hosts.yaml"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def keydir(tmp_path):
    """robot, monitor, gpu (allowed everywhere) and rogue (allowed nowhere) key pairs."""
    k = tmp_path / "keys"
    for name in ("robot", "monitor", "gpu", "rogue"):
        curve.generate(k, name)
    (k / "clients").mkdir()
    for name in ("robot", "monitor", "gpu"):
        shutil.copy(k / f"{name}.key", k / "clients")
    return k


def test_curve_for_picks_the_role_and_leaves_unlisted_endpoints_plain(keydir, tmp_path):
    cmap = tmp_path / "curve.json"
    ep = "tcp://127.0.0.1:5999"
    cmap.write_text(
        json.dumps(
            {ep: {"server_key": str(keydir / "robot.key"), "allow": str(keydir / "clients")}}
        )
    )
    secret = str(keydir / "gpu.key_secret")
    assert curve_for(ep, bind=True, secret=secret, curve_map=cmap) == CurveConfig(
        secret, allowed_clients_dir=str(keydir / "clients")
    )
    assert curve_for(ep, bind=False, secret=secret, curve_map=cmap) == CurveConfig(
        secret, server_public_key_file=str(keydir / "robot.key")
    )
    for other in ("ipc:///tmp/obs", "inproc://x", "tcp://127.0.0.1:5998"):
        assert curve_for(other, bind=False, secret=secret, curve_map=cmap) is None
    assert (
        curve_configs(binds=["ipc:///tmp/a"], connects=[None], secret=secret, curve_map=cmap)
        is None
    )
    assert curve_configs() is None  # no options at all: plain ipc, as before


def test_missing_key_files_and_secret_are_refused_with_the_fix(keydir, tmp_path):
    ep = "tcp://127.0.0.1:5999"
    cmap = tmp_path / "curve.json"
    cmap.write_text(
        json.dumps(
            {ep: {"server_key": str(tmp_path / "nope.key"), "allow": str(tmp_path / "no-dir")}}
        )
    )
    secret = str(keydir / "gpu.key_secret")
    with pytest.raises(CurveSetupError, match="--curve-secret"):
        curve_for(ep, bind=False, secret=None, curve_map=cmap)
    with pytest.raises(CurveSetupError, match="nope.key"):
        curve_for(ep, bind=False, secret=secret, curve_map=cmap)
    with pytest.raises(CurveSetupError, match="no-dir"):
        curve_for(ep, bind=True, secret=secret, curve_map=cmap)
    with pytest.raises(CurveSetupError, match="missing.json"):
        curve_for(ep, bind=True, secret=secret, curve_map=tmp_path / "missing.json")
    with pytest.raises(CurveSetupError, match="missing.key_secret"):
        curve_for(ep, bind=True, secret=str(tmp_path / "missing.key_secret"), curve_map=cmap)
    with pytest.raises(CurveSetupError, match="--curve-map"):
        curve_configs(binds=[ep], secret=secret)
    # the node's CLI says so too, before any socket exists (argparse: exit 2)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.conveyor_sorting.expert_node",
            "--obs",
            ep,
            "--actions",
            "tcp://127.0.0.1:5998",
            "--curve-map",
            str(cmap),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--curve-secret" in r.stderr, r.stderr


def test_subscriber_uses_each_servers_key_and_stays_plain_where_unlisted(keydir, tmp_path):
    a, b = (f"tcp://127.0.0.1:{p}" for p in free_ports(2))
    plain = f"ipc://{tmp_path}/plain"
    allow = str(keydir / "clients")
    pa = Publisher(
        a, "robot", curve=CurveConfig(keydir / "robot.key_secret", allowed_clients_dir=allow)
    )
    pb = Publisher(
        b, "monitor", curve=CurveConfig(keydir / "monitor.key_secret", allowed_clients_dir=allow)
    )
    pc = Publisher(plain, "plain")
    me = keydir / "gpu.key_secret"
    sub = Subscriber(
        [a, plain, b],
        ["heartbeat"],
        curve={
            a: CurveConfig(me, keydir / "robot.key"),
            b: CurveConfig(me, keydir / "monitor.key"),
        },
    )
    try:
        seen: set[str] = set()
        deadline = time.monotonic() + 20
        while seen != {"robot", "monitor", "plain"} and time.monotonic() < deadline:
            for p in (pa, pb, pc):
                p.publish("heartbeat", {"node": p.src, "sent_ns": 0})
            env = sub.recv(timeout_ms=20)
            while env is not None:
                seen.add(env.src)
                env = sub.recv()
        assert seen == {"robot", "monitor", "plain"}
    finally:
        for s in (sub, pa, pb, pc):
            s.close()


def test_two_hosts_file_validates_for_each_host():
    for host in ("robot", "gpu"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "rtinfer.launch.supervisor",
                str(TWO_HOSTS),
                "--check",
                "--host",
                host,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
    spec = load(TWO_HOSTS)
    for n in spec.nodes:  # every node is told its key and the map
        assert n.curve_secret and "--curve-secret" in n.args and "--curve-map" in n.args


def loopback_variant(keydir: Path, out: Path, *, policy_key: str) -> Path:
    """launch/two_hosts.yaml on 127.0.0.1 (free ports), absolute key paths, the expert as
    the policy; `policy_key` names the key pair the policy host uses."""
    data = yaml.safe_load(TWO_HOSTS.read_text())
    data["hosts"] = {h: {"address": "127.0.0.1"} for h in data["hosts"]}
    data.pop("run_dir", None)
    data["monitor"]["required"] = []  # the expert sends no heartbeat: not a death
    for e, port in zip(data["endpoints"].values(), free_ports(3)):
        e["url"] = f"tcp://127.0.0.1:{port}"
        e["server_key"] = str(keydir / Path(e["server_key"]).name)
        e["allow"] = str(keydir / "clients")
    data["endpoints"]["actions"]["server_key"] = str(keydir / f"{policy_key}.key")
    for n in data["nodes"]:
        n["curve_secret"] = str(keydir / Path(n["curve_secret"]).name)
        if n["name"] == "policy":
            n["entry"] = "examples.conveyor_sorting.expert_node:main"
            n["args"] = [
                "--obs",
                "${endpoints.obs}",
                "--actions",
                "${endpoints.actions}",
                "--curve-secret",
                "${node.curve_secret}",
                "--curve-map",
                "${curve_map}",
            ]
            n["curve_secret"] = str(keydir / f"{policy_key}.key_secret")
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def run_two_hosts(keydir: Path, tmp_path: Path, policy_key: str, seconds: float) -> tuple:
    """Both launchers; the gpu one is stopped (SIGTERM, a clean stop) once the robot's ends.
    Returns (sim report, monitor report, policy log)."""
    f = loopback_variant(keydir, tmp_path / "two_hosts.yaml", policy_key=policy_key)
    cmd = [
        sys.executable,
        "-m",
        "rtinfer.launch.supervisor",
        str(f),
        "--seconds",
        str(seconds),
        "--set",
        "seconds=5",
        "--run-dir",
    ]
    robot, gpu = (
        subprocess.Popen(
            cmd + [str(tmp_path / h), "--host", h],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        for h in ("robot", "gpu")
    )
    try:
        rc_robot = robot.wait(seconds + 30)
        gpu.terminate()
        rc_gpu = gpu.wait(30)
    finally:
        for p in (robot, gpu):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert (rc_robot, rc_gpu) == (0, 0)
    robot_dir = tmp_path / "robot"
    return (
        json.loads((robot_dir / "sim_report.json").read_text()),
        json.loads((robot_dir / "monitor_report.json").read_text()),
        (tmp_path / "gpu" / "policy.log").read_text(),
    )


@pytest.mark.slow
def test_two_hosts_launch_runs_over_curve_on_loopback(keydir, tmp_path):
    # the sim ends the robot's launch after 5 s of sorting; 60 s only bounds a slow start (at
    # 12 s, a loaded machine's start left the sim 1.7 s: one object spawned, none picked yet)
    sim, mon, _ = run_two_hosts(keydir, tmp_path, "gpu", seconds=60)
    print("two hosts:", json.dumps({"metrics": sim["metrics"], "controller": sim["controller"]}))
    assert sim["controller"]["chunks_accepted"] > 0
    assert sim["controller"]["rejected_bad"] == 0
    assert sim["metrics"]["picked"] > 0, sim["metrics"]
    # The sim's subscriber holds two CURVE servers (policy, monitor), each with its own key:
    # the monitor's pings got through to the sim, and its echoes back to the monitor.
    assert mon["cycles"] > 0 and mon["counters"]["echoes"] > 0, mon["counters"]


@pytest.mark.slow
def test_policy_with_a_key_outside_the_robots_allow_list_gets_nothing_applied(keydir, tmp_path):
    sim, _, policy_log = run_two_hosts(keydir, tmp_path, "rogue", seconds=8)
    assert sim["controller"]["chunks_accepted"] == 0
    assert sim["metrics"]["picked"] == 0
    assert "'cycles': 0" in policy_log, policy_log  # the robot never let it see an obs
