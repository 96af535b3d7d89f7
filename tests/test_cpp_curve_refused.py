"""The C++ client tries again after a CURVE server's allow-list refused it (docs/wire.md,
"The allow-list"): libzmq never reconnects after a ZAP refusal, so a C++ robot whose key is
written to its new node's allow-list a moment after its first handshake (docs/fleet.md,
"Across hosts") must retry, or it never gets that node's chunks. Real processes and sockets:
the example controller, a Python CURVE Publisher and its ZAP handler."""
from __future__ import annotations

import json
import shutil
import socket
import time

import numpy as np
import pytest

from cpp_client import ROOT, build, controller_cmd, start, stop
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import CurveConfig, allow_list, generate


@pytest.fixture(scope="module")
def release():
    return build("release")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Policy:
    """A CURVE Publisher of fresh action_chunks for robot cpparm (conveyor-v1's tokenizer)."""

    def __init__(self, endpoint: str, keys, allow) -> None:
        self.pub = Publisher(endpoint, "inf", curve=CurveConfig(
            keys / "policy/policy.key_secret", allowed_clients_dir=allow))
        self.tok = TokenizerConfig.load(ROOT / "models/zoo/conveyor-v1/tokenizer.json")
        self.decode, self.cycle = ActionTokenizer(self.tok).decode, 0

    def publish_chunk(self) -> None:
        self.cycle += 1
        capture, tok = wire.now_ns(), self.tok
        for i in range(tok.horizon):
            ids = np.array([100 + i, 50, 20, 255], np.int32)
            self.pub.publish("action_chunk", waypoint_body(
                self.cycle, i, tok.horizon, self.decode(ids), spec=tok.hash,
                period_ns=tok.period_ns, start_ns=tok.period_ns, dest="cpparm", tokens=ids),
                {"capture": capture, "obs_recv": capture, "first_token": capture})


def watch_refusals(allow) -> list[float]:
    """When (time.monotonic) the ZAP handler of `allow` refuses a key from now on, in a list
    that grows (the process's one AllowList of that directory, its check wrapped). Taken before
    the refusal is sent, so two refusals of one client are at least its wait apart."""
    keys, refused = allow_list(allow), []
    admits = keys.callback

    def callback(domain: str, key: bytes) -> bool:
        ok = admits(domain, key)
        if not ok:
            refused.append(time.monotonic())
        return ok
    keys.callback = callback
    return refused


def test_cpp_controller_refused_by_the_allow_list_is_admitted_once_its_key_is_added(
        release, tmp_path):
    """Refused, it gets nothing and tries again 0.1 s later, then twice as long each time;
    once its key is in the allow-list, it takes the node's chunks."""
    keys, allow = tmp_path / "keys", tmp_path / "allow"
    for name in ("policy", "cpp"):
        generate(keys / name, name)
    allow.mkdir()  # empty: the controller's key is not in it yet
    act, robot = f"tcp://127.0.0.1:{free_port()}", f"ipc://{tmp_path}/robot"
    curve_map = tmp_path / "curve.json"
    curve_map.write_text(json.dumps({act: {"server_key": str(keys / "policy/policy.key"),
                                           "allow": str(allow)}}))
    refused_at = watch_refusals(allow)
    policy = Policy(act, keys, allow)
    ctl = start(controller_cmd(release, act, robot, extra=[
        "--curve-secret", str(keys / "cpp/cpp.key_secret"), "--curve-map", str(curve_map)]))
    health = Subscriber(robot, ["health"])

    def accepted_after(until) -> list[int]:
        """chunks_accepted of each health received while publishing a chunk every 50 ms, until
        `until(seen)` holds or 20 s pass."""
        seen, end = [], time.monotonic() + 20
        while time.monotonic() < end and not until(seen):
            policy.publish_chunk()
            env = health.recv(50)
            if env is not None:
                seen.append(env.body["counters"]["chunks_accepted"])
        return seen

    try:
        assert "ready" in ctl.stdout.readline(), ctl.stderr.read() if ctl.poll() is not None else ""
        # joined to its health (slow joiner), then refused 4 times: it tries again
        refused = accepted_after(lambda seen: len(seen) >= 5 and len(refused_at) >= 4)
        assert len(refused_at) >= 4, f"refused {len(refused_at)} times: it does not try again"
        assert len(refused) >= 5 and max(refused) == 0, refused  # nothing while refused
        # 0.1 s after the first refusal, then twice as long each time (lower bounds only)
        gaps_s = [b - a for a, b in zip(refused_at, refused_at[1:4])]
        assert all(gap_s >= 0.1 * 2 ** k for k, gap_s in enumerate(gaps_s)), gaps_s
        shutil.copy(keys / "cpp/cpp.key", allow)
        allow_list(allow).refresh()  # what the Publisher's watch does about once a second
        admitted = accepted_after(lambda seen: seen and seen[-1] >= 3)
        assert admitted and admitted[-1] >= 3, f"none accepted in {len(admitted)} health after the key was added"
    finally:
        out, err = stop(ctl)
        policy.pub.close()
        health.close()
    assert ctl.returncode == 0, err
    c = json.loads(out.strip().splitlines()[-1])["counters"]
    assert c["chunks_accepted"] >= 3
    assert c["sub.refusals"] >= 1 and c["sub.reconnects"] >= 1, c
