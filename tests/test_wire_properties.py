"""Property tests: every valid message round-trips; no byte string raises anything but WireError."""

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.arrays import DTYPES, EXT_ARRAY, EXT_ARRAY_OOB, MAX_NDIM
from rtinfer.transport.wire import WireError

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
keys = st.text(max_size=8)  # map keys may be any unicode, empty included
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ns = st.integers(0, 2**63 - 1)
finite = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**64 - 1)
stamps = st.dictionaries(keys, ns, max_size=6)


def arrays(
    dtype=st.sampled_from(DTYPES),
    shape=hnp.array_shapes(min_dims=0, max_dims=MAX_NDIM, min_side=0, max_side=3),
):
    return dtype.flatmap(
        lambda dt: hnp.arrays(
            dt,
            shape,
            elements={"allow_nan": False, "allow_infinity": False} if dt.kind == "f" else None,
        )
    )


@st.composite
def action_chunks(draw):
    d = draw(st.integers(1, 8))
    count = draw(st.integers(1, 2**64 - 1))
    tokens = draw(st.none() | arrays(st.sampled_from(DTYPES[1:9]), st.just((d,))))
    return waypoint_body(
        draw(u64),
        draw(st.integers(0, min(count - 1, 2**64 - 1))),
        count,
        draw(arrays(st.just(np.dtype("<f4")), st.just((d,)))),
        spec=draw(st.text(max_size=16)),
        period_ns=draw(st.integers(1, 2**63 - 1)),
        start_ns=draw(ns),
        dest=draw(names),
        tokens=tokens,
    )


echo = st.fixed_dictionaries({"src": names, "seq": u64, "sent_ns": ns, "recv_ns": ns})


def _answered_after_received(body: dict) -> dict:
    """docs/wire.md: an echo's recv_ns is at most its sent_ns (one clock)."""
    if "echo" in body:
        body["echo"]["recv_ns"] = min(body["echo"]["recv_ns"], body["sent_ns"])
    return body


BODY = {
    "obs": st.fixed_dictionaries(
        {
            "values": st.dictionaries(keys, arrays(), max_size=4),
            "ints": st.dictionaries(keys, i64, max_size=4),
        }
    ),
    "action_chunk": action_chunks(),
    "heartbeat": st.fixed_dictionaries({"node": names, "sent_ns": ns}, optional={"echo": echo}).map(
        _answered_after_received
    ),
    "health": st.fixed_dictionaries(
        {
            "node": names,
            "state": st.text(max_size=8),
            "counters": st.dictionaries(keys, u64, max_size=4),
            "gauges": st.dictionaries(keys, finite, max_size=4),
        }
    ),
    "budget": st.fixed_dictionaries({"level": ns, "reason": st.text(max_size=20)}),
    "command": st.fixed_dictionaries(
        {"cmd": st.sampled_from(["safe_hold", "clear", "stop"]), "reason": st.text(max_size=20)}
    ),
    "trace": st.fixed_dictionaries(
        {
            "node": names,
            "cycle": u64,
            "stamps": stamps,
            "fields": st.dictionaries(keys, finite, max_size=4),
        }
    ),
}
messages = st.sampled_from(sorted(BODY)).flatmap(
    lambda kind: st.tuples(
        st.just(kind) | names.map(lambda s: f"{kind}/{s}"), BODY[kind], u64, names, stamps
    )
)


def assert_same(got, sent):
    if isinstance(sent, np.ndarray):
        assert not got.flags.writeable
        assert got.dtype.kind == sent.dtype.kind and got.dtype.itemsize == sent.dtype.itemsize
        assert got.dtype.byteorder in "<|="
        np.testing.assert_array_equal(got, sent)
        assert got.shape == sent.shape
    elif isinstance(sent, dict):
        assert list(got) == list(sent)
        for k in sent:
            assert_same(got[k], sent[k])
    else:
        assert type(got) is type(sent) and got == sent


@SETTINGS
@given(messages)
def test_every_valid_message_round_trips(msg):
    topic, body, seq, src, st_ = msg
    env = wire.decode(wire.encode(topic, body, seq=seq, src=src, stamps=st_))
    assert (env.version, env.topic, env.seq, env.src) == (wire.SCHEMA_VERSION, topic, seq, src)
    assert_same(env.stamps, st_)
    assert_same(env.body, body)


@SETTINGS
@given(messages, st.integers(0, 64))
def test_every_valid_message_round_trips_through_frames(msg, oob_bytes):
    topic, body, seq, src, st_ = msg
    frames = wire.encode_frames(topic, body, seq=seq, src=src, stamps=st_, oob_bytes=oob_bytes)
    env = wire.decode_frames([bytes(f) for f in frames])  # copies, as a socket would deliver
    assert_same(env.body, body)
    assert_same(env.stamps, st_)


def only_wire_errors(decode, data):
    try:
        assert isinstance(decode(data), wire.Envelope)
    except WireError:
        pass


@SETTINGS
@given(st.binary(max_size=512))
def test_random_bytes_raise_only_wire_error(data):
    only_wire_errors(wire.decode, data)


@SETTINGS
@given(st.lists(st.binary(max_size=64), max_size=4))
def test_random_frames_raise_only_wire_error(frames):
    only_wire_errors(wire.decode_frames, frames)


# Structured junk reaches deeper than random bytes: valid msgpack, plausible envelope shape.
ext = st.builds(
    lambda code, data: msgpack.ExtType(code, data),
    st.sampled_from([EXT_ARRAY, EXT_ARRAY_OOB, 0, 5, 127]),
    st.binary(max_size=40),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=6)
    | ext
)
junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=6) | st.integers(-9, 9), inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "version": st.just(1) | junk,
            "topic": st.sampled_from(sorted(BODY)) | junk,
            "seq": u64 | junk,
            "src": names | junk,
            "stamps": stamps | junk,
            "body": junk,
        },
    ),
    st.lists(st.binary(max_size=48), max_size=2),
)
def test_structured_junk_raises_only_wire_error(env, extra_frames):
    data = msgpack.packb(env, use_bin_type=True)
    only_wire_errors(wire.decode, data)
    only_wire_errors(wire.decode_frames, [data, *extra_frames])


def mutate(data: bytes, draw) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "set"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and buf:
            del buf[pos : pos + draw(st.integers(1, 8))]
        elif op == "set" and buf:
            buf[pos] = draw(
                st.sampled_from([0x00, 0x7F, 0x80, 0xC0, 0xC1, 0xC7, 0xD4, 0xDB, 0xDF, 0xFF])
            )
    return bytes(buf)


@SETTINGS
@given(messages, st.data())
def test_mutated_valid_messages_raise_only_wire_error(msg, data):
    topic, body, seq, src, st_ = msg
    encoded = wire.encode(topic, body, seq=seq, src=src, stamps=st_)
    only_wire_errors(wire.decode, mutate(encoded, data.draw))


@SETTINGS
@given(messages, st.data())
def test_mutated_multipart_messages_raise_only_wire_error(msg, data):
    topic, body, seq, src, st_ = msg
    frames = [
        bytes(f) for f in wire.encode_frames(topic, body, seq=seq, src=src, stamps=st_, oob_bytes=0)
    ]
    i = data.draw(st.integers(0, len(frames) - 1))
    frames[i] = mutate(frames[i], data.draw)
    if data.draw(st.booleans()):
        del frames[data.draw(st.integers(0, len(frames) - 1))]
    only_wire_errors(wire.decode_frames, frames)


def float_arrays(dt):
    """Any values, NaN, infinities and the dtype's extremes included (sums may overflow)."""
    big = float(np.finfo(dt).max)
    values = st.floats(width=8 * np.dtype(dt).itemsize) | st.sampled_from(
        [np.inf, -np.inf, np.nan, big, -big]
    )
    return hnp.arrays(
        dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6), elements=values
    )


@SETTINGS
@given(st.sampled_from(["<f2", "<f4", "<f8", ">f4"]).flatmap(float_arrays))
def test_fast_finite_check_agrees_with_numpy_and_never_warns(arr):
    import warnings

    from rtinfer.transport.schema import all_finite

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow/invalid warnings would escape decode
        assert all_finite(arr) == bool(np.isfinite(arr).all())


@SETTINGS
@given(
    st.integers(0, 64).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(
                st.sampled_from(
                    [
                        0,
                        0x7F800000,
                        0xFF800000,
                        0x7FC00000,
                        0x7F800001,
                        0x7F7FFFFF,
                        0x00800000,
                        0x80000001,
                    ]
                )
                | st.integers(0, 2**32 - 1),
                min_size=n,
                max_size=n,
            ),
        )
    )
)
def test_float32_bit_finite_check_agrees_with_numpy_on_any_bytes(case):
    """Any bit patterns: every NaN payload, both infinities, the largest finite and denormals."""
    from rtinfer.transport.schema import f32_finite

    n, words = case
    raw = np.array(words, dtype="<u4").tobytes()
    assert f32_finite(raw, n) == bool(np.isfinite(np.frombuffer(raw, "<f4")).all())


@SETTINGS
@given(arrays(), st.booleans())
def test_strided_and_byte_swapped_arrays_encode_as_their_values(arr, swap):
    view = arr[::-1] if arr.ndim else arr  # negative strides: not C-contiguous
    if swap:
        view = view.astype(view.dtype.newbyteorder())
    body = {"values": {"a": view}, "ints": {}}
    got = wire.decode(wire.encode("obs", body, seq=0, src="p")).body["values"]["a"]
    assert got.shape == view.shape and got.dtype.kind == view.dtype.kind
    np.testing.assert_array_equal(got, view)


@pytest.mark.parametrize(
    "topic, body",
    [
        ("health", {"node": "a", "state": "x" * 70000, "counters": {}, "gauges": {}}),
        (
            "action_chunk",
            {
                "cycle": 1,
                "index": 0,
                "count": 1,
                "dest": "a",
                "spec": "é" * 40000,
                "values": np.zeros(3, np.float32),
                "period_ns": 1,
                "start_ns": 1,
            },
        ),
    ],
)
def test_a_string_over_the_limit_is_refused_when_sent_not_only_when_received(topic, body):
    """What encodes must decode: a receiver refuses strings over 65,536 UTF-8 bytes, so the
    encoder does too (a SchemaError naming the field), on every path."""
    with pytest.raises(wire.SchemaError, match="over the 65536-byte limit"):
        wire.encode(topic, body, seq=0, src="a", stamps={"capture": 1})
