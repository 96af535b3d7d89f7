"""The action_chunk fast path (rtinfer.transport.chunk_codec) against the generic codec:
same bytes out, and the same verdict, error class and values in, for valid, invalid and
mutated messages. The fast path may decline (None) anything; it may never differ."""

from contextlib import contextmanager
from unittest import mock

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtinfer.transport import chunk_codec, wire
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.arrays import default_inline
from tests.test_wire_properties import action_chunks, assert_same, mutate, names, stamps

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
CHUNK_TOPICS = st.just("action_chunk") | names.map(lambda s: f"action_chunk/{s}")


@contextmanager
def generic_only():
    """wire's encode/decode with the fast path switched off: the reference verdicts."""
    with (
        mock.patch.object(wire, "encode_chunk", lambda *a: None),
        mock.patch.object(wire, "decode_chunk", lambda *a: None),
    ):
        yield


def outcome(fn, *args, **kw):
    """('ok', result) or (error class, None): what a call does, to compare two codecs."""
    try:
        return "ok", fn(*args, **kw)
    except wire.WireError as e:
        return type(e), None


def assert_same_envelope(got: wire.Envelope, want: wire.Envelope):
    assert (got.version, got.topic, got.seq, got.src) == (
        want.version,
        want.topic,
        want.seq,
        want.src,
    )
    assert_same(got.stamps, want.stamps)
    assert_same(got.body, want.body)


def assert_decoders_agree(data, topics=None):
    fast = outcome(wire.decode, data, topics=topics)
    with generic_only():
        ref = outcome(wire.decode, data, topics=topics)
    assert fast[0] == ref[0], (fast[0], ref[0], data.hex())
    if ref[0] == "ok":
        assert_same_envelope(fast[1], ref[1])


def assert_encoders_agree(
    topic, body, seq, src, stamps_, oob_bytes=65536, max_bytes=wire.DEFAULT_MAX_BYTES
):
    kw = dict(seq=seq, src=src, stamps=stamps_, oob_bytes=oob_bytes, max_bytes=max_bytes)
    fast = outcome(wire.encode_frames, topic, body, **kw)
    with generic_only():
        ref = outcome(wire.encode_frames, topic, body, **kw)
    assert fast[0] == ref[0]
    if ref[0] == "ok":
        assert [bytes(f) for f in fast[1]] == [bytes(f) for f in ref[1]]


@SETTINGS
@given(CHUNK_TOPICS, action_chunks(), st.integers(0, 2**64 - 1), names, stamps, st.integers(1, 256))
def test_valid_chunks_encode_to_the_generic_bytes_and_decode_to_its_values(
    topic, body, seq, src, st_, oob
):
    assert_encoders_agree(topic, body, seq, src, st_, oob_bytes=oob)
    data = wire.encode(topic, body, seq=seq, src=src, stamps=st_)
    assert_decoders_agree(data)
    assert_decoders_agree(data, topics=("action_chunk",))


def typical(**over):
    body = waypoint_body(
        7,
        1,
        4,
        np.linspace(-1, 1, 6, dtype=np.float32),
        spec="ab12" * 4,
        period_ns=20_000_000,
        start_ns=0,
        dest="arm",
        tokens=np.arange(6, dtype=np.int32),
    )
    body.update(over)
    return body


@pytest.mark.parametrize("tokens", [True, False])
def test_the_reference_encoders_chunks_take_the_fast_path_both_ways(tokens):
    body = typical() if tokens else {k: v for k, v in typical().items() if k != "tokens"}
    stamps_ = {"capture": 10**13, "obs_recv": 10**13 + 5, "publish": 2**63 - 1}
    data = chunk_codec.encode_chunk(
        "action_chunk", body, 3, "inf", stamps_, wire.DEFAULT_MAX_BYTES, 65536
    )
    with generic_only():
        assert data == wire.encode("action_chunk", body, seq=3, src="inf", stamps=stamps_)
    assert chunk_codec.decode_chunk(data, ("action_chunk",)) is not None
    assert chunk_codec.decode_chunk(memoryview(data), None) is not None
    env = wire.decode(data)
    assert not env.body["values"].flags.writeable and env.stamps == stamps_


# Bad values for each field, of the kinds a buggy producer sends; None: leave the field out.
BAD = {
    "cycle": [-1, 2**64, 1.0, True, None, np.uint64(3)],
    "index": [-1, 4, 2**64, "0", np.int64(1)],
    "count": [0, -1, 2**64, 1.5],
    "dest": ["", "a b", "x" * 129, "é", 5, ["arm"], "\ud800"],
    "values": [
        np.zeros(6, np.float64),
        np.zeros((2, 3), np.float32),
        np.zeros(0, np.float32),
        np.array([np.nan] * 6, np.float32),
        np.array([np.inf] * 6, np.float32),
        np.zeros(6, ">f4"),
        np.zeros(12, np.float32)[::2],
        [0.0] * 6,
        None,
    ],
    "tokens": [
        np.zeros(5, np.int32),
        np.zeros(6, np.float32),
        np.zeros(6, bool),
        np.zeros((6, 1), np.int8),
        np.zeros(6, ">i4"),
        np.zeros(6, np.longlong),
        np.zeros(6, np.uint64),
        None,
    ],
    "spec": [5, b"ab", "\ud800", "", "x" * 300, ["ab"]],
    "period_ns": [0, -5, 2**63, 1.0],
    "start_ns": [-1, 2**63, 0.0, np.int64(0)],
}


@SETTINGS
@given(
    st.sampled_from(sorted(BAD)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(BAD[k]))),
    st.booleans(),
    st.data(),
)
def test_bad_bodies_get_the_generic_verdict_and_error_class(field_value, drop, data):
    field, value = field_value
    body = typical()
    if drop and field != "tokens":
        del body[field]
    else:
        body[field] = value
    stamps_ = data.draw(
        st.sampled_from(
            [
                {"capture": 1},
                {"capture": -1},
                {"a": 2**63},
                {"b": 1.0},
                {str(i): i for i in range(16)},
                {"\ud800": 1},
                {},
            ]
        )
    )
    seq = data.draw(st.sampled_from([0, 2**64 - 1, 2**64, -1, True]))
    topic = data.draw(
        st.sampled_from(["action_chunk", "action_chunk/x", "obs", "action_chunk x", 3])
    )
    src = data.draw(st.sampled_from(["inf", "", "é", None]))
    assert_encoders_agree(topic, body, seq, src, stamps_)
    assert_encoders_agree("action_chunk", body, 1, "inf", {"c": 1}, max_bytes=200)


@SETTINGS
@given(CHUNK_TOPICS, action_chunks(), names, stamps, st.data())
def test_mutated_chunks_get_the_generic_verdict_error_class_and_values(topic, body, src, st_, data):
    encoded = wire.encode(
        topic, body, seq=data.draw(st.integers(0, 2**64 - 1)), src=src, stamps=st_
    )
    assert_decoders_agree(mutate(encoded, data.draw))
    assert_decoders_agree(mutate(encoded, data.draw), topics=(topic,))


@SETTINGS
@given(CHUNK_TOPICS, action_chunks(), names, stamps, st.data())
def test_same_length_changes_to_a_learnt_layout_get_the_generic_verdict_and_values(
    topic, body, src, st_, data
):
    """A decoded chunk leaves its layout's template; any bytes of the same length (values,
    int markers, keys, headers overwritten) must still decode as the generic codec says."""
    encoded = wire.encode(
        topic, body, seq=data.draw(st.integers(0, 2**64 - 1)), src=src, stamps=st_
    )
    assert_decoders_agree(encoded)
    changed = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 3))):
        changed[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(
            st.sampled_from([0x00, 0x7F, 0x80, 0xCC, 0xCF, 0xFF]) | st.integers(0, 255)
        )
    assert_decoders_agree(bytes(changed))
    assert_decoders_agree(bytes(changed), topics=(topic,))


def test_a_chunk_of_a_learnt_layout_is_read_by_its_template():
    stamps_ = {"capture": 10**13, "publish": 10**13 + 5}
    first = wire.encode("action_chunk", typical(), seq=300, src="inf", stamps=stamps_)
    wire.decode(first)
    template = chunk_codec._templates[len(first)]
    body = typical(
        cycle=9,
        index=3,
        values=np.full(6, 0.25, np.float32),
        tokens=np.arange(6, 12, dtype=np.int32),
    )
    second = wire.encode(
        "action_chunk",
        body,
        seq=301,
        src="inf",
        stamps={"capture": 10**13 + 9, "publish": 10**13 + 99},
    )
    got = chunk_codec._by_template(second, ("action_chunk",), template)
    assert got is not None and got[:4] == (
        "action_chunk",
        301,
        "inf",
        {"capture": 10**13 + 9, "publish": 10**13 + 99},
    )
    with generic_only():
        assert_same(got[4], wire.decode(second).body)
    assert not got[4]["values"].flags.writeable and not got[4]["tokens"].flags.writeable
    assert chunk_codec._by_template(second, ("action_chunk/x",), template) is None  # not subscribed
    late = first.replace(b"\xa5index\x01", b"\xa5index\x04")  # index 4 of count 4
    assert chunk_codec._by_template(late, None, template) is None
    with pytest.raises(wire.SchemaError):
        wire.decode(late)


def packed(env: dict) -> bytes:
    return msgpack.packb(env, default=default_inline, use_bin_type=True)


def envelope(**over):
    env = {
        "version": 2,
        "topic": "action_chunk",
        "seq": 3,
        "src": "inf",
        "stamps": {"capture": 10},
        "body": typical(),
    }
    env.update(over)
    return env


def repeated_stamp_key() -> bytes:
    good = packed(envelope(stamps={"capture": 10, "kapture": 11}))
    return good.replace(b"\xa7kapture", b"\xa7capture")  # same length: only the key repeats


@pytest.mark.parametrize(
    "data",
    [
        repeated_stamp_key(),
        packed(envelope()) + b"\x00",  # trailing byte
        packed(envelope(version=1)),
        packed(envelope(seq=-3)),
        packed(envelope(topic="obs")),
        packed(envelope(stamps={"capture": 2**63})),
        packed(envelope(body={**typical(), "extra": 1})),
        packed({k: envelope()[k] for k in reversed(wire.ENVELOPE_KEYS)}),  # any key order is valid
        packed(envelope(body=dict(reversed(typical().items())))),
        packed(envelope(stamps={str(i): i for i in range(16)})),  # map16: the generic path
        packed(
            envelope(body=typical(values=np.zeros(100, np.float32), tokens=np.zeros(100, np.int8)))
        ),
        packed(envelope(body=typical(index=2**64 - 1, count=2**64 - 1))),
        packed(envelope(body=typical(spec="é" * 40))),
        packed(envelope(src="x" * 40)),  # str8
        b"\x86" + packed(envelope())[1:40],  # truncated
    ],
    ids=lambda d: d[:0].hex() or None,
)
def test_hand_built_edge_cases_get_the_generic_verdict(data):
    assert_decoders_agree(data)
    assert_decoders_agree(data, topics=("action_chunk", "action_chunk/x"))
    assert_decoders_agree(data, topics=("obs",))


def test_any_int_width_decodes_the_same_and_int8_takes_the_generic_path():
    data = packed(envelope(seq=5))
    wide = data.replace(b"\xa3seq\x05", b"\xa3seq\xcf" + (5).to_bytes(8, "big"))
    assert chunk_codec.decode_chunk(wide, None)[1] == 5
    signed = data.replace(b"\xa3seq\x05", b"\xa3seq\xd0\x05")  # int8 5: valid msgpack
    assert chunk_codec.decode_chunk(signed, None) is None
    assert wire.decode(signed).seq == wire.decode(wide).seq == 5


def test_memos_stay_bounded_under_many_names():
    for i in range(chunk_codec._MEMO_MAX + 50):
        wire.decode(
            wire.encode(
                "action_chunk",
                typical(dest=f"r{i}", spec=f"s{i}"),
                seq=i,
                src=f"p{i}",
                stamps={f"k{i}": i},
            )
        )
    for memo in (
        chunk_codec._name_of,
        chunk_codec._str_of,
        chunk_codec._name_bytes,
        chunk_codec._str_bytes,
    ):
        assert len(memo) <= chunk_codec._MEMO_MAX
