"""Property fuzzing (hypothesis) of every subscriber-facing decoder and handler.

Inputs: random bytes, mutated valid messages of every topic (bit flips, truncation,
splices), wrong versions, huge declared sizes, NaN/inf, odd dtypes, wrong spec
hashes and dests, token and continuous waypoints, out-of-range token ids. The rule: decoders raise only WireError (or return a
valid Envelope); the bus counts and drops; the controller and the monitor count and go
on. The corpus in tests/fuzz/corpus/ seeds the mutations (and atheris).
"""

from __future__ import annotations

import math
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import Envelope, WireError
from tests.conftest import gantry_control
from tests.faults.common import LONG

CORPUS = Path(__file__).parent / "corpus" / "wire"
SEEDS = sorted(p.read_bytes() for p in CORPUS.glob("*.bin"))
FUZZ = settings(
    max_examples=3000 if LONG else 300,
    deadline=None,
    derandomize=not LONG,
    suppress_health_check=list(HealthCheck),
)


def must_reject_or_decode(fn, *args, **kw):
    """Call a decoder: a valid Envelope or WireError, nothing else."""
    try:
        env = fn(*args, **kw)
    except WireError:
        return None
    assert isinstance(env, Envelope)
    return env


@st.composite
def mutated(draw):
    """A corpus message with flips, truncation, insertion or a spliced tail."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "splice", "byte"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            data[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xC1, 0xCF, 0xD3, 0xDB, 0xFF]))
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(max_size=16))
        else:
            data[i:] = draw(st.sampled_from(SEEDS))[i:]
    return bytes(data)


def test_corpus_has_a_valid_message_of_every_topic():
    envs = [e for e in (must_reject_or_decode(wire.decode, s) for s in SEEDS) if e is not None]
    assert {e.topic for e in envs} >= {
        "obs",
        "action_chunk",
        "heartbeat",
        "health",
        "budget",
        "command",
        "trace",
    }
    assert {e.version for e in envs} == {wire.SCHEMA_VERSION}
    chunks = [e.body for e in envs if e.topic == "action_chunk"]  # both policy kinds seed
    assert any("tokens" in b for b in chunks) and any("tokens" not in b for b in chunks)


@FUZZ
@given(st.binary(max_size=512))
def test_decode_random_bytes_only_wire_error(data):
    must_reject_or_decode(wire.decode, data)


@FUZZ
@given(mutated())
def test_decode_mutated_messages_only_wire_error(data):
    must_reject_or_decode(wire.decode, data)
    must_reject_or_decode(wire.decode, data, max_bytes=64)


@FUZZ
@given(st.lists(st.one_of(mutated(), st.binary(max_size=64)), min_size=0, max_size=4))
def test_decode_frames_only_wire_error(frames):
    must_reject_or_decode(wire.decode_frames, frames)
    must_reject_or_decode(wire.decode_frames, [memoryview(f) for f in frames])


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)


@FUZZ
@given(
    st.fixed_dictionaries(
        {
            "v": st.one_of(st.integers(-3, 5), SCALARS),
            "topic": st.sampled_from(["obs", "action_chunk", "x", ""]),
            "seq": SCALARS,
            "src": SCALARS,
            "stamps": st.one_of(SCALARS, st.dictionaries(st.text(max_size=4), SCALARS, max_size=3)),
            "body": st.one_of(SCALARS, st.dictionaries(st.text(max_size=8), SCALARS, max_size=4)),
        }
    )
)
def test_decode_wrong_versions_and_field_types_only_wire_error(env):
    must_reject_or_decode(wire.decode, msgpack.packb(list(env.values())))
    must_reject_or_decode(wire.decode, msgpack.packb(env))


@FUZZ
@given(
    code=st.integers(0, 127),
    header=st.binary(max_size=24),
    dims=st.lists(st.integers(0, 2**63), max_size=4),
)
def test_array_ext_with_huge_declared_sizes_only_wire_error(code, header, dims):
    ext = msgpack.ExtType(code, header + msgpack.packb(dims) + b"\0" * 8)
    body = {"values": {"objects": ext}, "ints": {}}
    data = msgpack.packb([wire.SCHEMA_VERSION, "obs", 1, "sim", {"capture": 1}, body])
    must_reject_or_decode(wire.decode, data)


DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
]


@st.composite
def odd_arrays(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 6), max_size=3))
    n = int(np.prod(shape))
    raw = draw(
        st.binary(min_size=n * np.dtype(dtype).itemsize, max_size=n * np.dtype(dtype).itemsize)
    )
    return np.frombuffer(raw, dtype).reshape(shape).copy()


@pytest.fixture(scope="module")
def obs_tokens():
    from rtinfer.model.obs_tokens import ObsTokens
    from tests.conftest import TINY_SPEC

    return ObsTokens(TINY_SPEC)


@FUZZ
@given(
    values=st.dictionaries(
        st.sampled_from(["gantry", "objects", "instruction", "x"]), odd_arrays(), max_size=4
    ),
    ints=st.dictionaries(
        st.sampled_from(["instruction", "n"]), st.integers(-(2**63), 2**63 - 1), max_size=2
    ),
)
def test_obs_tokens_encode_on_decoded_bodies_only_wire_error(obs_tokens, values, ints):
    try:
        data = wire.encode("obs", {"values": values, "ints": ints}, seq=1, src="sim")
    except WireError:
        return  # the sender's validation refused it (NaN etc.): never reaches a node
    env = must_reject_or_decode(wire.decode, data)  # e.g. a bool array holding a 2
    if env is None:
        return
    try:
        instr, obs = obs_tokens.encode(env.body)
    except WireError:
        return
    assert obs.shape == (obs_tokens.length,) and obs.min() >= 0 and obs.max() <= obs_tokens.bins
    assert instr.min(initial=0) >= 0 and instr.max(initial=0) < obs_tokens.instr_classes


TOK = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0), horizon=2)
ACT = ActionSpec.from_tokenizer(TOK, ("m", "m", "m", "1"))


@FUZZ
@given(odd_arrays())
def test_action_tokenizer_decode_only_wire_error(tokens):
    tok = ActionTokenizer(TOK)
    try:
        out = tok.decode(tokens)
    except WireError:
        return
    assert out.dtype == np.float32 and np.isfinite(out).all()
    assert (out >= np.float32(min(TOK.low)) - 1e-6).all() and (
        out <= np.float32(max(TOK.high)) + 1e-6
    ).all()


@pytest.fixture(scope="module")
def raw_bus():
    """A raw zmq PUB (no validation) feeding a real Subscriber over inproc."""
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUB)
    raw.bind("inproc://fuzz-raw")
    sub = Subscriber("inproc://fuzz-raw", ["obs", "action_chunk", "command"], ctx=ctx)
    for _ in range(500):  # the subscription propagates asynchronously
        raw.send_multipart(
            [b"command", wire.encode("command", {"cmd": "clear", "reason": ""}, seq=0, src="t")]
        )
        if sub.recv(timeout_ms=5) is not None:
            break
    while sub.recv(timeout_ms=10) is not None:
        pass
    yield raw, sub
    sub.close()
    raw.close(linger=0)
    ctx.term()


@FUZZ
@given(
    topic=st.sampled_from([b"obs", b"action_chunk", b"command", b"obsx", b"action_chunkz"]),
    frames=st.lists(st.one_of(mutated(), st.binary(max_size=64)), min_size=0, max_size=3),
)
def test_subscriber_counts_raw_garbage_and_never_raises(raw_bus, topic, frames):
    raw, sub = raw_bus
    before = dict(sub.counters)
    raw.send_multipart([topic, *frames] if frames else [topic])
    c, got = sub.counters, None

    def handled() -> int:
        return (c["received"] - before["received"]) + (c["rejected"] - before["rejected"])

    for _ in range(100):  # a rejected message returns None: stop once it is counted
        got = sub.recv(timeout_ms=2) or got
        if handled():
            break
    assert handled() == 1, (topic, frames, c, before)
    if got is not None:
        assert got.topic == topic.decode() and got.topic in sub.topics


@pytest.fixture(scope="module")
def controller():
    from controllers.hardware import RobotState
    from controllers.node import ControllerConfig, ControllerNode

    class Plant:
        state = RobotState(0, np.array([0.0, 0.0, 0.2]), np.zeros(3))

        def read(self):
            return self.state

        def write(self, cmd):
            assert (np.abs(cmd.value) <= np.asarray(node.cfg.control.axis("effort_limit"))).all()

    ctx = zmq.Context()
    pub = Publisher("inproc://fuzz-chunks", "policy", ctx=ctx)
    sub = Subscriber("inproc://fuzz-chunks", ["action_chunk", "command"], ctx=ctx)
    out = Publisher("inproc://fuzz-health", "controller", ctx=ctx)
    node = ControllerNode(
        Plant(), ControllerConfig(gantry_control(), tokenizer=TOK, action=ACT), sub, out, TOK.hash
    )
    while node.counters["commands"] == 0:
        pub.publish("command", {"cmd": "clear", "reason": "sync"})
        node.tick()
    yield pub, node
    for s in (pub, sub, out):
        s.close()
    ctx.term()


def _handled(c: dict) -> int:
    return (
        c["waypoints_accepted"]
        + c["commands"]
        + sum(v for k, v in c.items() if k.startswith("rejected_"))
    )


@FUZZ
@given(
    tokens=st.one_of(st.none(), odd_arrays()),
    values=odd_arrays(),
    hash_ok=st.booleans(),
    dest_ok=st.booleans(),
    cycle=st.integers(0, 2**64 - 1),
    count=st.integers(1, 2**64 - 1),
    index=st.integers(0, 2**64 - 1),
    period=st.integers(1, 2**63 - 1),
    start=st.integers(0, 2**63 - 1),
    age_ns=st.integers(-(2**40), 2**40),
    cmd=st.sampled_from(["", "safe_hold", "clear"]),
)
def test_controller_counts_every_hostile_chunk_and_keeps_running(
    controller, tokens, values, hash_ok, dest_ok, cycle, count, index, period, start, age_ns, cmd
):
    pub, node = controller
    from rtinfer.transport.wire import now_ns

    index = index % count if index >= count and index % 3 else index  # mostly schema-valid
    spec = (TOK.hash if tokens is not None else ACT.hash) if hash_ok else "0" * 16
    body = waypoint_body(
        cycle,
        index,
        count,
        values.astype(np.float32) if values.dtype.kind == "f" else values,
        spec=spec,
        period_ns=period,
        start_ns=start,
        dest=node.robot if dest_ok else "another-robot",
        tokens=tokens,
    )
    before = _handled(node.counters)
    sent = 0
    try:
        sent += pub.publish("action_chunk", body, {"capture": max(0, now_ns() - age_ns)})
    except WireError:
        pass  # the sender's schema refused it
    if cmd:
        sent += pub.publish("command", {"cmd": cmd, "reason": "fuzz"})
    for _ in range(50):
        node.tick()
        if _handled(node.counters) - before == sent:
            break
    assert _handled(node.counters) - before == sent


@pytest.fixture(scope="module")
def monitor():
    from rtinfer.monitor.node import Monitor

    ctx = zmq.Context()
    pub = Publisher("inproc://fuzz-mon", "controller", ctx=ctx)
    mon = Monitor("inproc://fuzz-mon", "inproc://fuzz-ctl", ctx=ctx)
    while mon.sub.counters["received"] == 0:
        pub.publish("heartbeat", {"node": "sync", "sent_ns": 0})
        mon.spin_once(5)
    yield pub, mon
    mon.close()
    pub.close()
    ctx.term()


I64 = st.integers(0, 2**63 - 1)


@FUZZ
@given(
    node=st.sampled_from(["controller", "policy", "sim", "x" * 40]),
    sent=I64,
    echo=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "src": st.sampled_from(["monitor", "other"]),
                "seq": I64,
                "sent_ns": I64,
                "recv_ns": I64,
            }
        ),
    ),
    stamps=st.dictionaries(
        st.sampled_from(["capture", "obs_recv", "first_token", "publish", "apply"]), I64, max_size=5
    ),
    fields=st.dictionaries(
        st.text(max_size=6), st.floats(allow_nan=False, allow_infinity=False), max_size=3
    ),
)
def test_monitor_handles_hostile_heartbeats_echoes_and_traces(
    monitor, node, sent, echo, stamps, fields
):
    pub, mon = monitor
    hb = {"node": node, "sent_ns": sent}
    if echo is not None:  # answered before it arrived: refused by the wire (test_bus)
        hb["echo"] = {**echo, "recv_ns": min(echo["recv_ns"], sent)}
    pub.publish("heartbeat", hb)
    pub.publish("trace", {"node": node, "cycle": sent, "stamps": stamps, "fields": fields})
    pub.publish(
        "health",
        {
            "node": node,
            "state": "run",
            "counters": {"x": sent},
            "gauges": {k: v for k, v in fields.items()},
        },
    )
    before = mon.sub.counters["received"]
    for _ in range(20):
        mon.spin_once(5)
        if mon.sub.counters["received"] - before >= 3:
            break
    assert mon.sub.counters["received"] - before == 3
    s = mon.summary()
    assert all(math.isfinite(v) for v in _numbers(s)), s


def _numbers(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _numbers(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _numbers(v)
    elif isinstance(x, float):
        yield x
