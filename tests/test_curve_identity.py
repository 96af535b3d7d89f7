"""Identity by key (rtinfer.transport.identity) on envelopes received through the real bus:
robots bind CURVE obs endpoints with their own keys, a node-side Subscriber connects to
them, and an observation is accepted only from the key named after the src it declares."""

import contextlib
import io
import os
import shutil
import time

import pytest

from rtinfer.realtime.complaints import Complaints
from rtinfer.transport import curve
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import CurveConfig
from rtinfer.transport.identity import Identity


@pytest.fixture
def fleet(tmp_path):
    """Keys of node, cell-1, cell-2; the node's allow-list (both robots) and the robots'
    (the node)."""
    keys = {n: curve.generate(tmp_path / n, n) for n in ("node", "cell-1", "cell-2")}
    node_allow, robot_allow = tmp_path / "node-allow", tmp_path / "robot-allow"
    node_allow.mkdir(), robot_allow.mkdir()
    for n in ("cell-1", "cell-2"):
        shutil.copy(keys[n][0], node_allow)
    shutil.copy(keys["node"][0], robot_allow)
    return keys, node_allow, robot_allow


def obs(i: int = 0) -> dict:
    return {"values": {}, "ints": {"i": i}}


def test_accept_is_the_src_named_by_the_peers_key(tmp_path, fleet):
    keys, node_allow, _ = fleet
    out = io.StringIO()
    ident = Identity(curve.allow_list(node_allow), Complaints("policy", out).say)
    k1, k2 = (curve.load_public(keys[n][0]).decode() for n in ("cell-1", "cell-2"))
    assert ident.accept("cell-1", k1) and ident.accept("cell-2", k2)
    assert ident.accept("anyone", None)  # no CURVE: src as declared
    assert not ident.accept("cell-1", k2)
    assert not ident.accept("cell-1", curve.load_public(keys["node"][0]).decode())
    assert ident.counters == {"obs_wrong_src": 1, "obs_revoked": 1}
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "'cell-1'" in lines[0] and "key of 'cell-2'" in lines[0] and "cell-2.key" in lines[0]
    assert "'cell-1'" in lines[1] and "not in the allow-list" in lines[1]
    for _ in range(100):  # rate-limited: counted, not said
        ident.accept("cell-1", k2)
    assert ident.counters["obs_wrong_src"] == 101 and len(out.getvalue().splitlines()) == 2
    assert Identity(None).accept("cell-1", k2)  # no allow-list: nothing to name keys by


def test_identity_of_a_nodes_curve_uses_its_action_endpoints_allow_list(fleet):
    keys, node_allow, _ = fleet
    cfg = {"tcp://10.0.0.1:5556": CurveConfig(keys["node"][1], allowed_clients_dir=node_allow)}
    assert Identity.of(cfg, "tcp://10.0.0.1:5556").allow is curve.allow_list(node_allow)
    assert Identity.of(None, "ipc:///tmp/x").allow is None
    assert Identity.of(cfg, "tcp://10.0.0.1:9999").allow is None


def test_a_robot_declaring_another_robots_src_is_refused_and_a_revoked_key_too(fleet):
    keys, node_allow, robot_allow = fleet
    with contextlib.ExitStack() as stack:
        robots = {
            n: stack.enter_context(
                Publisher(
                    "tcp://127.0.0.1:*",
                    src,
                    curve=CurveConfig(keys[n][1], allowed_clients_dir=robot_allow),
                )
            )
            for n, src in (("cell-1", "cell-1"), ("cell-2", "cell-1"))
        }  # cell-2 lies
        cfg = {r.endpoint: CurveConfig(keys["node"][1], keys[n][0]) for n, r in robots.items()}
        sub = stack.enter_context(Subscriber(list(cfg), ["obs"], curve=cfg))
        ident = Identity(curve.allow_list(node_allow))

        def take(seconds: float) -> list[bool]:
            verdicts, end = [], time.monotonic() + seconds
            while time.monotonic() < end:
                for r in robots.values():
                    r.publish("obs", obs())
                while (env := sub.recv(timeout_ms=10)) is not None:
                    verdicts.append((env.src, ident.accept(env.src, sub.peer)))
            return verdicts

        got = take(1.0)
        assert ("cell-1", True) in got and ("cell-1", False) in got
        assert ident.counters == {"obs_wrong_src": sum(not ok for _, ok in got), "obs_revoked": 0}
        os.remove(node_allow / "cell-1.key")  # revoked
        curve.allow_list(node_allow).refresh()  # the node's action Publisher does this each second
        got = take(0.5)
        assert got and not any(ok for _, ok in got)
        assert ident.counters["obs_revoked"] > 0
