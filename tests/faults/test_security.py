"""Security: only allow-listed keys can command the robot; CURVE is the default on tcp://;
secrets stay private; nothing runs message content.

Rogue publishers (an unknown CURVE key, and no key at all) each send 1,000 fresh, valid
action chunks and 1,000 `stop` commands over real tcp sockets on 127.0.0.1 to a real
ControllerNode, both when its subscriber is the CURVE server (binds, with an allow-list)
and when it connects to a CURVE server (a rogue taking over the policy's port). The
controller's own counters prove that none was applied.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import textwrap
import time

import numpy as np
import pytest

from controllers.hardware import Command, RobotState
from controllers.node import ControllerConfig, ControllerNode
from rtinfer.launch.file import load
from rtinfer.launch.yaml_lines import LaunchError
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport import curve
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import CurveConfig
from rtinfer.transport.wire import now_ns
from tests.conftest import gantry_control
from tests.faults.common import PY, ROOT

N_ROGUE = 1000
N_GOOD = 200
TOK = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0), horizon=1)
ENC = ActionTokenizer(TOK)
TOKENS = ENC.encode(np.array([[0.1, 0.0, 0.2, 0.0]]))[0]


class Plant:
    def __init__(self):
        self.state = RobotState(0, np.array([0.0, 0.0, 0.2]), np.zeros(3))

    def read(self):
        return self.state

    def write(self, cmd: Command):
        pass


ROBOT = "controller"  # the src of make_node's publisher: the controller's robot name


def chunk(cycle: int) -> dict:
    return waypoint_body(
        cycle,
        0,
        1,
        ENC.decode(TOKENS),
        spec=TOK.hash,
        period_ns=50_000_000,
        start_ns=50_000_000,
        dest=ROBOT,
        tokens=TOKENS,
    )


def send_flood(pubs, node: ControllerNode, n: int) -> None:
    """Each publisher sends n fresh chunks and n `stop` commands; the node ticks meanwhile."""
    for i in range(n):
        for p in pubs:
            p.publish("action_chunk", chunk(10_000 + i), {"capture": now_ns()})
            p.publish("command", {"cmd": "stop", "reason": "rogue"})
        node.tick()
        if i % 50 == 0:
            time.sleep(0.005)  # let the handshakes (and their failures) happen meanwhile
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        node.tick()


def send_good(pub, node: ControllerNode) -> None:
    """Sync on `clear` commands (PUB/SUB joins late), then N_GOOD fresh chunks."""
    end = time.monotonic() + 15
    while node.counters["commands"] == 0:
        assert time.monotonic() < end, "the allow-listed publisher never got through"
        pub.publish("command", {"cmd": "clear", "reason": "sync"})
        time.sleep(0.01)
        node.tick()
    before = node.counters["chunks_accepted"]
    for i in range(N_GOOD):
        pub.publish("action_chunk", chunk(i), {"capture": now_ns()})
        node.tick()
    end = time.monotonic() + 5
    while node.counters["chunks_accepted"] - before < N_GOOD and time.monotonic() < end:
        node.tick()
        time.sleep(0.001)


@pytest.fixture
def certs(tmp_path):
    paths = {n: curve.generate(tmp_path / n, n) for n in ("robot", "policy", "rogue")}
    allow = tmp_path / "allow"
    allow.mkdir()
    shutil.copy(paths["policy"][0], allow)
    shutil.copy(paths["robot"][0], allow)
    return paths, allow


def make_node(sub) -> ControllerNode:
    pub = Publisher("inproc://health-sink", ROBOT)
    node = ControllerNode(
        Plant(), ControllerConfig(gantry_control(), tokenizer=TOK), sub, pub, TOK.hash
    )
    assert node.robot == ROBOT
    node._closers = [pub]
    return node


def test_rogue_chunks_and_commands_are_never_applied_by_a_curve_server_controller(certs):
    paths, allow = certs
    sub = Subscriber(
        "tcp://127.0.0.1:*",
        ["action_chunk", "command"],
        bind=True,
        curve=CurveConfig(paths["robot"][1], allowed_clients_dir=allow),
    )
    ep = sub.endpoints[0]
    node = make_node(sub)
    rogue = Publisher(
        ep, "rogue", bind=False, curve=CurveConfig(paths["rogue"][1], paths["robot"][0])
    )
    plain = Publisher(ep, "plain", bind=False)
    good = Publisher(
        ep, "policy", bind=False, curve=CurveConfig(paths["policy"][1], paths["robot"][0])
    )
    try:
        send_good(good, node)  # the link is demonstrably up
        base = dict(node.counters)
        send_flood([rogue, plain], node, N_ROGUE)
        applied = node.counters["chunks_accepted"] - base["chunks_accepted"]
        commands = node.counters["commands"] - base["commands"]
        print(
            f"rogue (server side): sent {2 * N_ROGUE} chunks + {2 * N_ROGUE} stops, "
            f"applied {applied}, commands {commands}, received {sub.counters['received']}"
        )
        assert applied == 0 and commands == 0 and node.state != "stopped"
        assert node.counters["chunks_accepted"] == N_GOOD  # every allow-listed chunk, no more
    finally:
        for s in (rogue, plain, good, sub, *node._closers):
            s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rogue_server_on_the_policys_port_is_never_applied_by_a_curve_client_controller(certs):
    paths, allow = certs
    ep = f"tcp://127.0.0.1:{_free_port()}"
    sub = Subscriber(
        ep, ["action_chunk", "command"], curve=CurveConfig(paths["robot"][1], paths["policy"][0])
    )
    node = make_node(sub)
    policy = CurveConfig(paths["policy"][1], allowed_clients_dir=allow)
    try:
        # An imposter with its own key binds the policy's port: the handshake fails.
        with Publisher(
            ep, "rogue", curve=CurveConfig(paths["rogue"][1], allowed_clients_dir=allow)
        ) as imposter:
            send_flood([imposter], node, N_ROGUE)
        assert node.counters["chunks_accepted"] == 0 and node.counters["commands"] == 0
        with Publisher(ep, "policy", curve=policy) as good:  # the real one comes back
            send_good(good, node)
        assert node.counters["chunks_accepted"] == N_GOOD
        base = dict(node.counters)
        # A plaintext imposter: mechanism mismatch, nothing passes either.
        with Publisher(ep, "plain") as imposter:
            send_flood([imposter], node, N_ROGUE)
        applied = node.counters["chunks_accepted"] - base["chunks_accepted"]
        print(
            f"rogue (client side): applied {applied} of {2 * N_ROGUE} imposter chunks; "
            f"real policy {base['chunks_accepted']} of {N_GOOD}"
        )
        assert applied == 0 and node.counters["commands"] == base["commands"]
        assert node.state != "stopped"
    finally:
        for s in (sub, *node._closers):
            s.close()


def test_curve_client_reconnects_to_the_real_policy_after_a_plaintext_imposter(certs):
    """libzmq never reconnects a CURVE client after a protocol error (the plaintext
    imposter); the bus reconnects that endpoint itself (bus.heal.Healer.heal)."""
    paths, allow = certs
    ep = f"tcp://127.0.0.1:{_free_port()}"
    sub = Subscriber(
        ep, ["action_chunk", "command"], curve=CurveConfig(paths["robot"][1], paths["policy"][0])
    )
    node = make_node(sub)
    try:
        with Publisher(ep, "plain") as imposter:
            send_flood([imposter], node, 50)
        with Publisher(
            ep, "policy", curve=CurveConfig(paths["policy"][1], allowed_clients_dir=allow)
        ) as good:
            end = time.monotonic() + 5
            while node.counters["commands"] == 0 and time.monotonic() < end:
                good.publish("command", {"cmd": "clear", "reason": "sync"})
                time.sleep(0.01)
                node.tick()
        assert node.counters["commands"] > 0
    finally:
        for s in (sub, *node._closers):
            s.close()


def test_tcp_endpoints_require_curve_by_default_in_launch_files(tmp_path):
    f = tmp_path / "l.yaml"
    f.write_text(
        textwrap.dedent("""\
        endpoints: {actions: "tcp://127.0.0.1:5556"}
        nodes: [{name: a, entry: "rtinfer.monitor.node:main"}]
        """)
    )
    with pytest.raises(LaunchError, match="requires CURVE"):
        load(f)
    f.write_text(
        textwrap.dedent("""\
        endpoints: {actions: {url: "tcp://127.0.0.1:5556", curve: "off"}}
        nodes: [{name: a, entry: "rtinfer.monitor.node:main"}]
        """)
    )
    assert not load(f).endpoints["actions"].curve  # only an explicit `curve: off` disables it
    for shipped in sorted((ROOT / "launch").glob("*.yaml")):
        spec = load(shipped, check_entries=False)
        for e in spec.endpoints.values():
            if e.url.startswith("tcp://"):
                assert e.curve, f"{shipped.name}: {e.name} is tcp without CURVE"


def test_keys_generate_never_prints_the_secret_and_writes_it_0600(tmp_path):
    out = subprocess.run(
        [PY, "-m", "rtinfer.cli", "keys", "generate", str(tmp_path / "k"), "--name", "robot"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    secret_file = tmp_path / "k" / "robot.key_secret"
    secret = curve.load_secret(secret_file).decode()
    assert secret not in out.stdout + out.stderr
    assert "secret-key" not in out.stdout + out.stderr
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o700


SOURCES = [
    p for d in ("rtinfer", "controllers", "models", "examples") for p in (ROOT / d).rglob("*.py")
]


def _grep(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [
        f"{p.relative_to(ROOT)}:{n}"
        for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if rx.search(line)
    ]


def test_subprocesses_get_argument_lists_never_strings():
    # A string command means a shell or a split: message content could end up executed.
    assert (
        _grep(
            r"subprocess\.(run|Popen|call|check_call|check_output)\(\s*(f?[\"']|\w+\s*\+\s*[\"'])"
        )
        == []
    )
    assert _grep(r"os\.(system|popen|exec\w*|spawn\w*)\(") == []


def test_no_unsafe_deserialisers():
    assert (
        _grep(
            r"yaml\.(unsafe_load|load)\(|yaml\.(Unsafe|Full)?Loader\b|torch\.load\((?!.*weights_only=True)"
        )
        == []
    )
    assert _grep(r"\bjsonpickle\b|\bmarshal\.loads\b") == []
