"""Behaviour of the wire format: round trips, zero-copy, and every rejection reason."""

import re
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.arrays import EXT_ARRAY, EXT_ARRAY_OOB, default_inline
from rtinfer.transport.schema import SCHEMA_VERSION
from rtinfer.transport.wire import (
    ArrayError,
    MalformedError,
    OversizeError,
    SchemaError,
    TopicError,
    VersionError,
    WireError,
)

f32 = np.float32


def chunk(**over):
    body = waypoint_body(
        41,
        0,
        4,
        np.array([0.1, -0.2, 0.3, 1.0], f32),
        spec="9f2c",
        period_ns=25_000_000,
        start_ns=25_000_000,
        dest="cell1",
        tokens=np.arange(4, dtype=np.int32),
    )
    body.update(over)
    return body


def continuous_chunk(**over):
    """A waypoint of a continuous-chunk policy: no tokens, spec = the action spec's hash."""
    body = waypoint_body(
        41,
        0,
        4,
        np.array([0.1, -0.2, 0.3, 1.0], f32),
        spec="7e1d",
        period_ns=25_000_000,
        start_ns=0,
        dest="cell1",
    )
    body.update(over)
    return body


BODIES = {
    "obs": {
        "values": {"objects": np.zeros((3, 4), f32), "gantry": np.ones(7, f32)},
        "ints": {"instruction": 2},
    },
    "action_chunk": chunk(),
    "heartbeat": {
        "node": "infer",
        "sent_ns": 5,
        "echo": {"src": "ctl", "seq": 9, "sent_ns": 1, "recv_ns": 3},
    },
    "health": {
        "node": "monitor",
        "state": "ok",
        "counters": {"misses": 0},
        "gauges": {"p99_ms": 3.5},
    },
    "budget": {"level": 2, "reason": "slack below 10 ms"},
    "command": {"cmd": "safe_hold", "reason": "deadline missed 3x"},
    "trace": {
        "node": "ctl",
        "cycle": 41,
        "stamps": {"capture": 1, "apply": 9},
        "fields": {"err_m": 0.01},
    },
}


def raw(env: dict) -> bytes:
    """Pack an envelope without validation, as a buggy or hostile sender would."""
    return msgpack.packb(env, default=default_inline, use_bin_type=True)


def env_of(topic="action_chunk", body=None, **over) -> dict:
    env = {
        "version": SCHEMA_VERSION,
        "topic": topic,
        "seq": 3,
        "src": "infer",
        "stamps": {"capture": 10},
        "body": chunk() if body is None else body,
    }
    env.update(over)
    return env


def array_ext(header: bytes, data: bytes = b"") -> msgpack.ExtType:
    return msgpack.ExtType(EXT_ARRAY, header + data)


# ---- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("topic", sorted(BODIES))
def test_every_body_type_round_trips(topic):
    data = wire.encode(topic, BODIES[topic], seq=7, src="node-1", stamps={"capture": 1})
    env = wire.decode(data)
    assert (env.version, env.topic, env.seq, env.src) == (SCHEMA_VERSION, topic, 7, "node-1")
    assert env.body.keys() == BODIES[topic].keys()


def test_schema_version_is_2():
    assert SCHEMA_VERSION == 2


def test_a_continuous_chunk_without_tokens_round_trips():
    body = continuous_chunk()
    env = wire.decode(wire.encode("action_chunk", body, seq=7, src="infer", stamps={"capture": 1}))
    assert "tokens" not in env.body and env.body.keys() == body.keys()
    assert (env.body["dest"], env.body["spec"], env.body["start_ns"]) == ("cell1", "7e1d", 0)
    np.testing.assert_array_equal(env.body["values"], body["values"])


def test_stamps_keep_their_order_along_the_path():
    stamps = {"capture": 30, "obs_recv": 10, "first_token": 20, "publish": 25}
    env = wire.decode(wire.encode("action_chunk", chunk(), seq=1, src="i", stamps=stamps))
    assert list(env.stamps.items()) == list(stamps.items())


def test_decoded_arrays_are_equal_read_only_and_little_endian():
    body = chunk(values=np.array([1.5, 2.5], ">f4"), tokens=np.array([3, 4], ">i2"))
    env = wire.decode(wire.encode("action_chunk", body, seq=1, src="i"))
    assert env.body["values"].dtype == np.dtype("<f4") and env.body["tokens"].dtype == np.dtype(
        "<i2"
    )
    np.testing.assert_array_equal(env.body["values"], [1.5, 2.5])
    assert not env.body["values"].flags.writeable


def test_non_contiguous_array_is_sent_as_its_values():
    grid = np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2]
    env = wire.decode(wire.encode("obs", {"values": {"g": grid}, "ints": {}}, seq=1, src="s"))
    np.testing.assert_array_equal(env.body["values"]["g"], grid)


def test_numpy_scalars_encode_as_plain_numbers():
    body = {
        "node": "m",
        "state": "ok",
        "counters": {"n": np.int64(3)},
        "gauges": {"g": np.float32(0.5)},
    }
    env = wire.decode(wire.encode("health", body, seq=np.uint64(2), src="m"))
    assert (
        type(env.body["counters"]["n"]) is int and env.body["gauges"]["g"] == 0.5 and env.seq == 2
    )


def test_subtopic_uses_the_schema_of_its_kind():
    env = wire.decode(
        wire.encode("obs/cell1", BODIES["obs"], seq=1, src="sim"), topics={"obs/cell1"}
    )
    assert env.topic == "obs/cell1"


def test_heartbeat_echo_is_optional():
    body = {"node": "ctl", "sent_ns": 1}
    assert "echo" not in wire.decode(wire.encode("heartbeat", body, seq=1, src="c")).body


def test_large_arrays_travel_out_of_band_without_copies():
    image = np.arange(480 * 640, dtype=np.uint16).reshape(480, 640)
    body = {"values": {"image": image, "gantry": np.zeros(7, f32)}, "ints": {}}
    frames = wire.encode_frames("obs", body, seq=1, src="cam", oob_bytes=1024)
    assert len(frames) == 2 and frames[1].nbytes == image.nbytes
    env = wire.decode_frames(frames)
    assert np.shares_memory(env.body["values"]["image"], image)
    assert not env.body["values"]["image"].flags.writeable
    np.testing.assert_array_equal(env.body["values"]["image"], image)


def test_frames_survive_a_real_zmq_multipart_send():
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.PAIR) as tx, ctx.socket(zmq.PAIR) as rx:
        rx.bind("inproc://wire-test")
        tx.connect("inproc://wire-test")
        arr = np.random.default_rng(0).random((64, 64)).astype(f32)
        body = {"values": {"a": arr, "b": arr[:2, :2]}, "ints": {"k": -1}}
        tx.send_multipart(
            [b"obs", *wire.encode_frames("obs", body, seq=5, src="s", oob_bytes=64)], copy=False
        )
        assert rx.poll(5000)
        parts = rx.recv_multipart(copy=False)
        env = wire.decode_frames(parts[1:])
        assert parts[0].bytes == env.topic.encode()
        np.testing.assert_array_equal(env.body["values"]["a"], arr)


def test_docs_hex_example_is_what_the_code_produces():
    text = (Path(__file__).parent.parent / "docs" / "wire.md").read_text()
    block = re.search(r"<!-- hex-example -->\s*```\n(.*?)```", text, re.S).group(1)
    hex_bytes = bytes.fromhex("".join(line.split("  ")[1] for line in block.splitlines()))
    example = waypoint_body(
        7,
        0,
        1,
        np.array([0.5, -1.0], f32),
        spec="ab12",
        period_ns=20_000_000,
        start_ns=20_000_000,
        dest="arm",
        tokens=np.array([128, 3], np.uint8),
    )
    assert hex_bytes == wire.encode(
        "action_chunk", example, seq=42, src="inf", stamps={"capture": 1000}
    )


# ---- rejections: envelope ----------------------------------------------------------------


def test_wrong_version_is_rejected_with_version_error():
    with pytest.raises(VersionError, match="version 1 is not supported"):
        wire.decode(raw(env_of(version=1)))
    with pytest.raises(VersionError, match="version 3 is not supported"):
        wire.decode(raw(env_of(version=3)))


def test_missing_version_is_rejected():
    env = env_of()
    del env["version"]
    with pytest.raises(VersionError):
        wire.decode(raw(env))


def test_bool_version_is_rejected():
    with pytest.raises(VersionError):
        wire.decode(raw(env_of(version=True)))


def test_unknown_envelope_key_is_rejected():
    with pytest.raises(SchemaError, match="unknown"):
        wire.decode(raw({**env_of(), "extra": 1}))


def test_missing_envelope_key_is_rejected():
    env = env_of()
    del env["stamps"]
    with pytest.raises(SchemaError, match="missing"):
        wire.decode(raw(env))


def test_unknown_topic_is_rejected():
    with pytest.raises(TopicError, match="unknown topic"):
        wire.decode(raw(env_of(topic="telemetry")))


def test_topic_the_receiver_did_not_ask_for_is_rejected():
    with pytest.raises(TopicError):
        wire.decode(raw(env_of()), topics={"obs"})


@pytest.mark.parametrize("seq", [-1, True, 1.0, "1", None])
def test_seq_that_is_not_a_u64_is_rejected(seq):
    with pytest.raises(SchemaError, match="seq"):
        wire.decode(raw(env_of(seq=seq)))
    with pytest.raises(SchemaError, match="seq"):
        wire.encode("action_chunk", chunk(), seq=seq, src="i")


def test_seq_beyond_u64_is_rejected_on_encode():
    with pytest.raises(SchemaError, match="out of range"):
        wire.encode("action_chunk", chunk(), seq=2**64, src="i")


def test_negative_stamp_is_rejected():
    with pytest.raises(SchemaError, match=r"stamps\['capture'\]"):
        wire.decode(raw(env_of(stamps={"capture": -5})))


def test_non_string_map_keys_are_rejected():
    for key in (1, b"capture", None):  # int/nil keys: strict_map_key; bin: max_bin_len=0
        with pytest.raises(MalformedError):
            wire.decode(raw(env_of(stamps={key: 5})))
    with pytest.raises(SchemaError, match="must be strings"):
        wire.encode("action_chunk", chunk(), seq=1, src="i", stamps={("a",): 5})


def test_map_with_a_repeated_key_is_rejected():
    # msgpack-python cannot pack a repeated key, so rename one after packing
    data = raw(env_of(stamps={"capture": 5, "xxxxxxx": 6})).replace(b"xxxxxxx", b"capture", 1)
    with pytest.raises(MalformedError, match="repeats a key"):
        wire.decode(data)


def test_empty_or_spaced_names_are_rejected():
    for src in ("", "a b", "x" * 129):
        with pytest.raises(SchemaError):
            wire.decode(raw(env_of(src=src)))


def test_top_level_that_is_not_a_map_is_rejected():
    with pytest.raises(MalformedError, match="must be a map"):
        wire.decode(msgpack.packb(1))


# ---- rejections: bodies ------------------------------------------------------------------


def test_nan_in_action_values_is_rejected():
    with pytest.raises(ArrayError, match="NaN or inf"):
        wire.decode(raw(env_of(body=chunk(values=np.array([0.0, np.nan, 0, 0], f32)))))


def test_inf_in_obs_values_is_rejected_on_encode_and_decode():
    body = {"values": {"gantry": np.array([[1, np.inf]], np.float16)}, "ints": {}}
    with pytest.raises(ArrayError, match=r"body.values\['gantry'\]"):
        wire.encode("obs", body, seq=1, src="s")
    with pytest.raises(ArrayError):
        wire.decode(raw(env_of(topic="obs", body=body)))


def test_huge_but_finite_values_are_accepted():
    body = {"values": {"v": np.array([3e38, -3e38], f32)}, "ints": {}}
    assert wire.decode(wire.encode("obs", body, seq=1, src="s")).body["values"]["v"][0] == f32(3e38)


@pytest.mark.parametrize("gauge", [float("nan"), float("inf"), True, "1.0"])
def test_non_finite_or_non_numeric_gauge_is_rejected(gauge):
    body = {**BODIES["health"], "gauges": {"g": gauge}}
    with pytest.raises(SchemaError, match=r"gauges\['g'\]"):
        wire.decode(raw(env_of(topic="health", body=body)))


def test_missing_body_field_is_rejected():
    body = chunk()
    del body["period_ns"]
    with pytest.raises(SchemaError, match="missing field.*period_ns"):
        wire.encode("action_chunk", body, seq=1, src="i")


def test_unknown_body_field_is_rejected():
    with pytest.raises(SchemaError, match="unknown field.*'speed'"):
        wire.decode(raw(env_of(body=chunk(speed=1))))


def test_bool_where_int_expected_is_rejected():
    with pytest.raises(SchemaError, match="body.cycle.*got bool"):
        wire.decode(raw(env_of(body=chunk(cycle=True))))


def test_float_where_int_expected_is_rejected():
    with pytest.raises(SchemaError, match="body.period_ns"):
        wire.encode("action_chunk", chunk(period_ns=2.5e7), seq=1, src="i")


@pytest.mark.parametrize("over", [{"count": 0}, {"index": 4}, {"period_ns": 0}, {"cycle": -1}])
def test_out_of_range_chunk_integers_are_rejected(over):
    with pytest.raises(SchemaError):
        wire.decode(raw(env_of(body=chunk(**over))))


def test_tokens_and_values_of_different_length_are_rejected():
    with pytest.raises(ArrayError, match="tokens shape"):
        wire.decode(raw(env_of(body=chunk(tokens=np.arange(3, dtype=np.int32)))))


@pytest.mark.parametrize("field", ["dest", "spec", "start_ns", "values"])
def test_a_waypoint_missing_a_v2_field_is_rejected(field):
    for body in (chunk(), continuous_chunk()):
        del body[field]
        with pytest.raises(SchemaError, match=f"missing field.*{field}"):
            wire.encode("action_chunk", body, seq=1, src="i")


@pytest.mark.parametrize(
    "over", [{"dest": ""}, {"dest": "a b"}, {"start_ns": -1}, {"start_ns": 1.0}, {"spec": 5}]
)
def test_bad_dest_start_or_spec_is_rejected(over):
    with pytest.raises(SchemaError):
        wire.decode(raw(env_of(body=continuous_chunk(**over))))


def test_v1_tokenizer_field_is_rejected_as_unknown():
    with pytest.raises(SchemaError, match="unknown field.*'tokenizer'"):
        wire.decode(raw(env_of(body=chunk(tokenizer="9f2c"))))


def test_action_values_must_be_float32():
    with pytest.raises(ArrayError, match="float32"):
        wire.encode("action_chunk", chunk(values=np.zeros(4)), seq=1, src="i")


def test_unknown_command_is_rejected():
    with pytest.raises(SchemaError, match="not a command"):
        wire.encode("command", {"cmd": "reboot", "reason": ""}, seq=1, src="m")


def test_negative_budget_level_is_rejected():
    with pytest.raises(SchemaError, match="body.level"):
        wire.encode("budget", {"level": -1, "reason": "x"}, seq=1, src="m")


def test_msgpack_list_in_body_is_rejected():
    with pytest.raises(MalformedError):
        wire.decode(raw(env_of(topic="obs", body={"values": {}, "ints": {"a": [1, 2]}})))


def test_encode_reports_a_bad_body_as_wire_error():
    with pytest.raises(WireError):
        wire.encode("obs", {"values": {"x": object()}, "ints": {}}, seq=1, src="s")
    with pytest.raises(WireError):
        wire.encode("obs", {"values": {}, "ints": {"x": 2**70}}, seq=1, src="s")


# ---- rejections: arrays ------------------------------------------------------------------


def header(code=10, ndim=1, dims=(4,), reserved=b"\0" * 6) -> bytes:
    return bytes([code, ndim]) + reserved + b"".join(d.to_bytes(8, "little") for d in dims)


def obs_with(ext) -> bytes:
    return raw(env_of(topic="obs", body={"values": {"x": ext}, "ints": {}}))


def test_array_whose_byte_length_disagrees_with_its_shape_is_rejected():
    with pytest.raises(ArrayError, match="needs 16"):
        wire.decode(obs_with(array_ext(header(), b"\0" * 12)))


def test_array_with_too_many_dims_is_rejected():
    with pytest.raises(ArrayError, match="ndim"):
        wire.decode(obs_with(array_ext(header(ndim=9, dims=(1,) * 9), b"\0" * 4)))
    with pytest.raises(ArrayError, match="at most 8"):
        wire.encode("obs", {"values": {"x": np.zeros((1,) * 9)}, "ints": {}}, seq=1, src="s")


def test_dtype_off_the_allow_list_is_rejected():
    with pytest.raises(ArrayError, match="allow-list"):
        wire.decode(obs_with(array_ext(header(code=12), b"\0" * 16)))
    with pytest.raises(ArrayError):
        wire.encode("obs", {"values": {"x": np.zeros(2, complex)}, "ints": {}}, seq=1, src="s")


def test_nonzero_reserved_header_bytes_are_rejected():
    with pytest.raises(ArrayError, match="not zero"):
        wire.decode(obs_with(array_ext(header(reserved=b"\1" + b"\0" * 5), b"\0" * 16)))


def test_bool_array_with_non_boolean_bytes_is_rejected():
    with pytest.raises(ArrayError, match="bool"):
        wire.decode(obs_with(array_ext(header(code=0, dims=(2,)), b"\x01\x07")))


@pytest.mark.parametrize("n", [2, 1 << 16], ids=["inline", "out-of-band"])
def test_a_bool_array_with_non_boolean_bytes_is_refused_when_sending(n):
    bad = np.full(n, 7, np.uint8).view(np.bool_)
    send = wire.encode_frames if n > 2 else wire.encode
    with pytest.raises(ArrayError, match="0 and 1"):
        send("obs", {"values": {"v": bad}, "ints": {}}, seq=1, src="s")
    frames = send("obs", {"values": {"v": bad != 0}, "ints": {}}, seq=1, src="s")
    frames = frames if isinstance(frames, list) else [frames]
    assert wire.decode_frames(frames).body["values"]["v"].all()


def test_unknown_ext_type_is_rejected():
    with pytest.raises(MalformedError, match="ext type 9"):
        wire.decode(obs_with(msgpack.ExtType(9, b"")))


def test_out_of_band_reference_in_a_single_frame_message_is_rejected():
    ext = msgpack.ExtType(EXT_ARRAY_OOB, header() + (1).to_bytes(8, "little"))
    with pytest.raises(MalformedError, match="decode_frames"):
        wire.decode(obs_with(ext))


# ---- rejections: framing and size --------------------------------------------------------


def test_oversize_message_is_rejected_before_unpacking():
    junk = b"\xc1" * 200  # not msgpack at all: only a size check that runs first says oversize
    with pytest.raises(OversizeError, match="200 bytes"):
        wire.decode(junk, max_bytes=100)


def test_huge_declared_lengths_are_rejected_without_allocating():
    for prefix in (
        b"\xdb\xff\xff\xff\xf0",
        b"\xdf\xff\xff\xff\xf0",
        b"\xdd\xff\xff\xff\xf0",
        b"\xc9\xff\xff\xff\xf0\x01",
        b"\xc6\xff\xff\xff\xf0",
    ):
        with pytest.raises(MalformedError):
            wire.decode(prefix + b"\0" * 16)


def test_trailing_bytes_are_rejected():
    with pytest.raises(MalformedError):
        wire.decode(raw(env_of()) + b"\0")


@pytest.mark.parametrize("data", [None, "text", 7, [b"x"], b""])
def test_non_message_inputs_are_rejected(data):
    with pytest.raises(MalformedError):
        wire.decode(data)


def test_encode_refuses_a_message_receivers_would_drop_as_oversize():
    with pytest.raises(OversizeError):
        wire.encode(
            "obs", {"values": {"x": np.zeros(100, f32)}, "ints": {}}, seq=1, src="s", max_bytes=256
        )


def frames_of(n_oob=1):
    body = {"values": {f"a{i}": np.full(8, i, f32) for i in range(n_oob)}, "ints": {}}
    return wire.encode_frames("obs", body, seq=1, src="s", oob_bytes=1)


def test_frame_not_referenced_by_the_envelope_is_rejected():
    with pytest.raises(MalformedError, match="not referenced"):
        wire.decode_frames([*frames_of(), b"\0" * 32])


def test_frame_referenced_twice_is_rejected():
    env = wire.decode_frames(frames_of(1))  # sanity: valid as sent
    assert env.body["values"]["a0"].shape == (8,)
    oob = msgpack.ExtType(EXT_ARRAY_OOB, header(dims=(8,)) + (1).to_bytes(8, "little"))
    data = raw(env_of(topic="obs", body={"values": {"a": oob, "b": oob}, "ints": {}}))
    with pytest.raises(MalformedError, match="unused frame"):
        wire.decode_frames([data, b"\0" * 32])


def test_frame_whose_length_disagrees_with_its_array_is_rejected():
    envelope, frame = frames_of(1)
    with pytest.raises(ArrayError, match="frame 1"):
        wire.decode_frames([envelope, bytes(frame)[:-4]])


def test_empty_frame_list_is_rejected():
    with pytest.raises(MalformedError):
        wire.decode_frames([])


def test_total_size_of_all_frames_is_limited():
    frames = frames_of(2)
    with pytest.raises(OversizeError, match="all frames"):
        wire.decode_frames(frames, max_bytes=len(frames[0]) + 40)


def test_wire_error_is_a_value_error_for_callers_that_catch_broadly():
    assert issubclass(WireError, ValueError)
    assert all(
        issubclass(e, WireError)
        for e in (ArrayError, MalformedError, OversizeError, SchemaError, TopicError, VersionError)
    )
