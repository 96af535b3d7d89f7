"""CURVE over real tcp sockets on 127.0.0.1: the binding side authenticates connecting
clients against an allow-list; unknown keys and plaintext peers get nothing through."""
import contextlib
import os
import shutil
import stat
import time

import numpy as np
import pytest
import zmq

from rtinfer.transport import curve
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import CurveConfig

N = 1000


@pytest.fixture
def certs(tmp_path):
    """server, client (allowed), rogue (valid key, not allowed) + the allow-list dir."""
    paths = {name: curve.generate(tmp_path / name, name) for name in ("server", "client", "rogue")}
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    shutil.copy(paths["client"][0], allowed)
    return paths, allowed


def hb(node: str, i: int = 0) -> dict:
    return {"node": node, "sent_ns": i}


def wait_first(pub: Publisher, sub: Subscriber, node: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pub.publish("heartbeat", hb(node))
        if sub.recv(timeout_ms=20) is not None:
            return
    raise AssertionError(f"{node}: nothing arrived through CURVE")


def test_generated_secret_is_private_and_loads(tmp_path):
    public, secret = curve.generate(tmp_path / "k", "node")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o700
    assert curve.load_public(public) == curve.load_public(secret)
    assert len(curve.load_secret(secret)) == 40  # Z85 of 32 bytes
    with pytest.raises(ValueError, match="no secret key"):
        os.chmod(public, 0o600)
        curve.load_secret(public)


def test_secret_readable_by_others_is_refused(tmp_path):
    _, secret = curve.generate(tmp_path, "node")
    os.chmod(secret, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        curve.load_secret(secret)


def test_only_tcp_requires_curve():
    assert curve.requires_curve("tcp://10.0.0.2:5555")
    assert not curve.requires_curve("ipc:///tmp/x.sock")
    assert not curve.requires_curve("inproc://x")


def test_only_allow_listed_publishers_get_through(certs):
    paths, allowed = certs
    server = CurveConfig(paths["server"][1], allowed_clients_dir=allowed)
    with Subscriber("tcp://127.0.0.1:*", ["heartbeat"], bind=True, curve=server) as sub:
        ep = sub.endpoints[0]
        good = Publisher(ep, "good", bind=False,
                         curve=CurveConfig(paths["client"][1], paths["server"][0]))
        rogue = Publisher(ep, "rogue", bind=False,
                          curve=CurveConfig(paths["rogue"][1], paths["server"][0]))
        plain = Publisher(ep, "plain", bind=False)
        with good, rogue, plain:
            wait_first(good, sub, "good")
            for i in range(N):  # interleaved, so the link is demonstrably up meanwhile
                rogue.publish("heartbeat", hb("rogue", i))
                plain.publish("heartbeat", hb("plain", i))
                good.publish("heartbeat", hb("good", i))
                if i % 100 == 0:
                    time.sleep(0.01)
            seen = {"good": 0, "rogue": 0, "plain": 0}
            deadline = time.monotonic() + 10
            while seen["good"] < N and time.monotonic() < deadline:
                env = sub.recv(timeout_ms=100)
                if env is not None:
                    seen[env.src] += 1
            time.sleep(0.3)  # anything still in flight from the others would show now
            while (env := sub.recv(timeout_ms=100)) is not None:
                seen[env.src] += 1
    assert seen == {"good": N, "rogue": 0, "plain": 0}


def test_binding_publisher_serves_only_allow_listed_subscribers(certs):
    paths, allowed = certs
    server = CurveConfig(paths["server"][1], allowed_clients_dir=allowed)
    with Publisher("tcp://127.0.0.1:*", "srv", curve=server) as pub:
        good = Subscriber(pub.endpoint, ["heartbeat"],
                          curve=CurveConfig(paths["client"][1], paths["server"][0]))
        rogue = Subscriber(pub.endpoint, ["heartbeat"],
                           curve=CurveConfig(paths["rogue"][1], paths["server"][0]))
        with good, rogue:
            wait_first(pub, good, "srv")
            for i in range(N):
                pub.publish("heartbeat", hb("srv", i))
            time.sleep(0.3)
            assert sum(1 for _ in iter(lambda: good.recv(timeout_ms=200), None)) > 0
            assert rogue.recv(timeout_ms=200) is None
            assert rogue.counters["received"] == 0


def test_client_with_the_wrong_server_key_gets_nothing(certs):
    paths, allowed = certs
    server = CurveConfig(paths["server"][1], allowed_clients_dir=allowed)
    with Subscriber("tcp://127.0.0.1:*", ["heartbeat"], bind=True, curve=server) as sub, \
            Publisher(sub.endpoints[0], "c", bind=False,
                      curve=CurveConfig(paths["client"][1], paths["rogue"][0])) as pub:
        for i in range(100):
            pub.publish("heartbeat", hb("c", i))
            time.sleep(0.002)
        assert sub.recv(timeout_ms=300) is None


def test_curve_servers_on_one_context_share_one_authenticator(certs):
    paths, allowed = certs
    server = CurveConfig(paths["server"][1], allowed_clients_dir=allowed)
    other = CurveConfig(paths["server"][1], allowed_clients_dir=paths["rogue"][0].parent)
    ctx = zmq.Context()
    with contextlib.ExitStack() as stack:
        stack.callback(ctx.term)  # runs last: every socket below is closed first
        a = stack.enter_context(Subscriber("tcp://127.0.0.1:*", ["heartbeat"], bind=True,
                                           curve=server, ctx=ctx))
        b = stack.enter_context(Subscriber("tcp://127.0.0.1:*", ["heartbeat"], bind=True,
                                           curve=server, ctx=ctx))
        with pytest.raises(ValueError, match="already authenticates"):
            stack.enter_context(Subscriber("tcp://127.0.0.1:*", ["heartbeat"], bind=True,
                                           curve=other, ctx=ctx))
        a.close()  # b's authenticator must survive a's close
        with Publisher(b.endpoints[0], "c", bind=False,
                       curve=CurveConfig(paths["client"][1], paths["server"][0])) as pub:
            wait_first(pub, b, "c")


def test_misconfigured_curve_is_refused_up_front(certs):
    paths, _ = certs
    with pytest.raises(ValueError, match="allowed_clients_dir"):
        Subscriber("tcp://127.0.0.1:*", ["heartbeat"], bind=True,
                   curve=CurveConfig(paths["server"][1]))
    with pytest.raises(ValueError, match="server_public_key_file"):
        Publisher("tcp://127.0.0.1:9", "p", bind=False, curve=CurveConfig(paths["client"][1]))


def test_a_curve_subscriber_reconnects_after_a_plaintext_server_held_its_endpoint(certs):
    """libzmq treats a plaintext server as a protocol error and never reconnects that
    endpoint; the bus reconnects it itself, so the real server gets through afterwards."""
    paths, allowed = certs
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        ep = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with Subscriber(ep, ["heartbeat"], curve=CurveConfig(paths["client"][1],
                                                         paths["server"][0])) as sub:
        with Publisher(ep, "imposter") as imposter:  # plaintext: until a handshake failed
            end = time.monotonic() + 5
            while sub.reconnects == 0:
                assert time.monotonic() < end, "no protocol error seen, or not reconnected"
                imposter.publish("heartbeat", hb("imposter"))
                assert sub.recv(timeout_ms=20) is None  # nothing plaintext gets through
        with Publisher(ep, "server", curve=CurveConfig(paths["server"][1],
                                                       allowed_clients_dir=allowed)) as server:
            wait_first(server, sub, "server", timeout_s=5.0)


def test_a_curve_subscriber_reconnects_after_a_frame_over_its_hard_cap(certs):
    """libzmq ends a session on a frame over ZMQ_MAXMSGSIZE and never restores it, CURVE or
    not; the bus reconnects (counted), and everything published after that arrives."""
    paths, allowed = certs
    with Publisher("tcp://127.0.0.1:*", "server", hwm=5000,
                   curve=CurveConfig(paths["server"][1], allowed_clients_dir=allowed)) as pub, \
            Subscriber(pub.endpoint, ["heartbeat", "obs"], max_bytes=100_000, hwm=5000,
                       curve=CurveConfig(paths["client"][1], paths["server"][0])) as sub:
        wait_first(pub, sub, "server")
        while sub.recv(timeout_ms=100) is not None:
            pass
        assert pub.publish("obs", {"values": {"img": np.zeros(sub.hard_cap_bytes + 1, np.uint8)},
                                   "ints": {}})
        wait_first(pub, sub, "server")  # a heartbeat after the reconnect
        assert sub.sessions_ended == 1 and sub.reconnects == 1
        while sub.recv(timeout_ms=100) is not None:
            pass
        for i in range(N):
            pub.publish("heartbeat", hb("server", i))
        got, end = [], time.monotonic() + 10
        while len(got) < N and time.monotonic() < end:
            env = sub.recv(timeout_ms=100)
            if env is not None and env.topic == "heartbeat":
                got.append(env.body["sent_ns"])
        assert got == list(range(N))  # nothing lost after the reconnect
        assert sub.counters["oversize"] == 0 and sub.counters["rejected"] == 0
