"""Generate the shared wire test vectors (tests/vectors/README.md says the format).

    .venv/bin/python tests/vectors/make_vectors.py          # rewrite manifest.json and msg/
    .venv/bin/python tests/vectors/make_vectors.py --check  # exit 1 if they are out of date

Every vector states the verdict it must produce; generating also checks that the Python
reference decoder (rtinfer.transport.wire) gives exactly that verdict, so a vector never
just records whatever the code happens to do. Controller vectors state the counters each
message must move; tests/test_vectors.py runs them through controllers.node.ControllerNode
and tests/test_cpp_client.py through the C++ ChunkRules.
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
from pathlib import Path

import msgpack
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rtinfer.model.action_spec import ActionSpec  # noqa: E402
from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig  # noqa: E402
from rtinfer.transport import wire  # noqa: E402
from rtinfer.transport.arrays import pack_inline  # noqa: E402
from rtinfer.transport.committed import prefix_hash  # noqa: E402

HERE = Path(__file__).resolve().parent
TOKENIZER = TokenizerConfig.load(ROOT / "models/zoo/conveyor-v1/tokenizer.json")
ACTION = ActionSpec.load(ROOT / "models/zoo/conveyor-act/action_spec.json")


# --- raw msgpack pieces, for messages the encoder would refuse to write ------------------------
def p(v) -> bytes:
    return msgpack.packb(v, use_bin_type=True)


def rmap(pairs) -> bytes:
    """A map from (key bytes or value, value bytes or value) pairs: repeats allowed."""
    n = len(pairs)
    head = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
    return head + b"".join(
        (k if isinstance(k, bytes) else p(k)) + (v if isinstance(v, bytes) else p(v))
        for k, v in pairs
    )


def ext(code: int, payload: bytes) -> bytes:
    """An ext value of any type code (msgpack.ExtType refuses negative codes)."""
    n, c = len(payload), struct.pack("b", code)
    fixed = {1: b"\xd4", 2: b"\xd5", 4: b"\xd6", 8: b"\xd7", 16: b"\xd8"}
    if n in fixed:
        return fixed[n] + c + payload
    head = b"\xc7" + bytes([n]) if n < 256 else b"\xc8" + struct.pack(">H", n)
    return head + c + payload


def arr_payload(code: int, dims, data: bytes = b"", reserved: bytes = b"\0" * 6) -> bytes:
    return bytes([code, len(dims)]) + reserved + b"".join(struct.pack("<Q", d) for d in dims) + data


def arr(a: np.ndarray) -> bytes:
    return p(pack_inline(a))


def envelope(body: bytes, *, topic="obs", seq=0, src="sim", stamps=None, version=2) -> bytes:
    return rmap(
        [
            ("version", version if isinstance(version, bytes) else p(version)),
            ("topic", topic if isinstance(topic, bytes) else p(topic)),
            ("seq", seq if isinstance(seq, bytes) else p(seq)),
            ("src", src if isinstance(src, bytes) else p(src)),
            ("stamps", stamps if isinstance(stamps, bytes) else p(stamps or {"capture": 1000})),
            ("body", body),
        ]
    )


F32 = np.array([0.5, -1.0, 0.25, 1.0], np.float32)
OBS_OK = {"values": {"gantry": np.zeros(8, np.float32)}, "ints": {"instruction_id": 3}}


def obs_body(values=None, ints=None) -> bytes:
    vals = values if values is not None else [("gantry", arr(np.zeros(8, np.float32)))]
    return rmap([("values", rmap(vals)), ("ints", rmap(ints or []))])


def chunk_fields(**over):
    tok = np.array([128, 3, 0, 255], np.int32)
    f = {
        "cycle": p(7),
        "index": p(0),
        "count": p(4),
        "dest": p("arm"),
        "values": arr(ActionTokenizer(TOKENIZER).decode(tok)),
        "spec": p(TOKENIZER.hash),
        "period_ns": p(50_000_000),
        "start_ns": p(50_000_000),
        "tokens": arr(tok),
    }
    for k, v in over.items():
        if v is None:
            del f[k]
        else:
            f[k] = v
    return f


def chunk_body(**over) -> bytes:
    return rmap(list(chunk_fields(**over).items()))


def nested(depth: int) -> bytes:
    """A message `depth` containers deep: the envelope, body, ints, then maps inside."""
    inner = b"\x80"
    for _ in range(depth - 3):
        inner = rmap([("k", inner)])
    return envelope(rmap([("values", b"\x80"), ("ints", inner)]))


# --- the decode vectors ---------------------------------------------------------------------
def decode_vectors():
    """(name, frames, verdict, extra) with verdict 'ok' or the reference's error class."""
    v = []

    def add(name, frames, verdict, **extra):
        v.append((name, frames if isinstance(frames, list) else [frames], verdict, extra))

    def good(name, topic, body, **kw):
        add(
            name,
            wire.encode(
                topic,
                body,
                seq=kw.pop("seq", 5),
                src=kw.pop("src", "sim"),
                stamps=kw.pop("stamps", {"capture": 1000, "publish": 2000}),
            ),
            "ok",
        )

    tok = ActionTokenizer(TOKENIZER)
    tokens = np.array([128, 3, 0, 255], np.int32)
    chunk = {
        "cycle": 7,
        "index": 0,
        "count": 4,
        "dest": "arm",
        "values": tok.decode(tokens),
        "spec": TOKENIZER.hash,
        "period_ns": 50_000_000,
        "start_ns": 50_000_000,
        "tokens": tokens,
    }
    cont = {**chunk, "spec": ACTION.hash, "values": F32}
    del cont["tokens"]
    # valid messages, every topic kind
    good("ok_action_chunk_tokens", "action_chunk", chunk)
    good("ok_action_chunk_continuous", "action_chunk", cont)
    good(
        "ok_action_chunk_tokens_int8",
        "action_chunk",
        {**chunk, "tokens": np.array([-1, 0, 1, 127], np.int8)},
    )
    good(
        "ok_action_chunk_tokens_uint64",
        "action_chunk",
        {**chunk, "tokens": np.array([2**64 - 1, 0, 1, 2], np.uint64)},
    )
    good(
        "ok_obs_cell",
        "obs",
        {
            "values": {
                "objects": np.zeros((6, 4), np.float32),
                "gantry": np.arange(8, dtype=np.float32),
                "held": np.array([-1], np.float32),
                "instruction": np.array([2, 0, 1], np.int32),
            },
            "ints": {"instruction_id": 4},
        },
    )
    good(
        "ok_obs_every_dtype",
        "obs",
        {
            "values": {
                "b": np.array([True, False]),
                "i8": np.array([-128, 127], np.int8),
                "i16": np.array([-3], np.int16),
                "i32": np.array([[1, 2], [3, 4]], np.int32),
                "i64": np.array([-(2**63)], np.int64),
                "u8": np.array([255], np.uint8),
                "u16": np.array([65535], np.uint16),
                "u32": np.array([2**32 - 1], np.uint32),
                "u64": np.array([2**64 - 1], np.uint64),
                "f16": np.array([1.5, -2.0], np.float16),
                "f64": np.array([1e300], np.float64),
                "scalar": np.array(3.5, np.float32),
                "empty": np.zeros((0,), np.float32),
                "empty3d": np.zeros((2, 0, 3), np.uint8),
                "": np.zeros((1, 1, 1, 1, 1, 1, 1, 1), np.int8),
            },
            "ints": {"neg": -(2**63), "pos": 2**63 - 1, "": 0},
        },
    )
    good("ok_topic_obs_slash", "obs/", OBS_OK)
    good("ok_topic_obs_double_slash", "obs//x", OBS_OK)
    good("ok_topic_obs_path", "obs/a/b", OBS_OK)
    good("ok_heartbeat", "heartbeat", {"node": "ctl", "sent_ns": 5})
    good(
        "ok_heartbeat_echo",
        "heartbeat",
        {
            "node": "ctl",
            "sent_ns": 9,
            "echo": {"src": "monitor", "seq": 2**64 - 1, "sent_ns": 3, "recv_ns": 4},
        },
    )
    good(
        "ok_health",
        "health",
        {
            "node": "ctl",
            "state": "ok",
            "counters": {"ticks": 2**64 - 1},
            "gauges": {"a": 1.5, "b": -(2**63), "c": 2**64 - 1},
        },
    )
    good("ok_budget", "budget", {"level": 2**63 - 1, "reason": ""})
    good("ok_command", "command", {"cmd": "safe_hold", "reason": "slack low"})
    good(
        "ok_trace",
        "trace",
        {
            "node": "ctl",
            "cycle": 3,
            "stamps": {"capture": 1, "apply": 2},
            "fields": {"e2e_ms": 12.5},
        },
    )
    good(
        "ok_names_128",
        "trace",
        {"node": "n" * 128, "cycle": 0, "stamps": {}, "fields": {}},
        src="~" * 128,
        stamps={"": 0, "x" * 200: 2**63 - 1},
    )
    good("ok_unicode_text", "command", {"cmd": "stop", "reason": "über 😀 \u0800"})
    good("ok_long_str", "command", {"cmd": "stop", "reason": "r" * 65536})
    good(
        "ok_zero_size_big_dims",
        "obs",
        {
            "values": {
                "z": np.lib.stride_tricks.as_strided(
                    np.zeros(1, np.uint8), (2**31, 2**31, 0), (0, 0, 0)
                )
            },
            "ints": {},
        },
    )
    add(
        "ok_zero_size_dims_at_limit",
        envelope(obs_body([("z", ext(1, arr_payload(5, [2**62 - 1, 2, 0])))])),
        "ok",
    )
    # other widths and encodings a receiver must accept
    add(
        "ok_wide_ints",
        envelope(
            obs_body(),
            version=b"\xd0\x02",
            seq=b"\xcf" + struct.pack(">Q", 1),
            stamps=b"\x81\xa7capture\xd3" + struct.pack(">q", 5),
        ),
        "ok",
    )
    add("ok_str8_name", envelope(obs_body(), src=b"\xd9\x03sim"), "ok")
    add("ok_map16_envelope", b"\xde\x00\x06" + envelope(obs_body())[1:], "ok")
    add(
        "ok_float32_gauge",
        envelope(
            rmap(
                [
                    ("node", "n"),
                    ("state", "ok"),
                    ("counters", {}),
                    ("gauges", rmap([("g", b"\xca" + struct.pack(">f", 0.5))])),
                ]
            ),
            topic="health",
        ),
        "ok",
    )
    add(
        "ok_map_4096",
        envelope(
            rmap(
                [
                    ("node", "n"),
                    ("state", "ok"),
                    ("counters", {}),
                    ("gauges", {f"g{i}": i for i in range(4096)}),
                ]
            ),
            topic="health",
        ),
        "ok",
    )
    # multipart: arrays out of band
    frames = wire.encode_frames(
        "action_chunk", chunk, seq=1, src="inf", stamps={"capture": 5}, oob_bytes=2
    )
    add("ok_oob_two_frames", [bytes(f) for f in frames], "ok")
    frames = wire.encode_frames(
        "obs",
        {
            "values": {
                "a": np.arange(6, dtype=np.float64).reshape(2, 3),
                "b": np.zeros(0, np.int16),
            },
            "ints": {},
        },
        seq=1,
        src="sim",
        oob_bytes=0,
    )
    add("ok_oob_empty_frame", [bytes(f) for f in frames], "ok")

    # size
    add("oversize", envelope(obs_body()), "OversizeError", max_bytes=40)
    add(
        "oversize_all_frames",
        [
            bytes(f)
            for f in wire.encode_frames("action_chunk", chunk, seq=1, src="inf", oob_bytes=2)
        ],
        "OversizeError",
        max_bytes=200,
    )
    # the msgpack parse
    good_bytes = envelope(obs_body())
    add("empty", b"", "MalformedError")
    add("truncated", good_bytes[:-3], "MalformedError")
    add("truncated_map_header", b"\xde\x00", "MalformedError")
    add("trailing_bytes", good_bytes + b"\x00", "MalformedError")
    add("never_used_byte_c1", envelope(b"\xc1"), "MalformedError")
    add("top_level_int", p(2), "MalformedError")
    add("top_level_nil", b"\xc0", "MalformedError")
    add("top_level_empty_array", b"\x90", "MalformedError")
    add("utf8_invalid_byte", envelope(obs_body(), src=b"\xa3s\xffm"), "MalformedError")
    add("utf8_overlong", envelope(obs_body(), src=b"\xa2\xc0\xaf"), "MalformedError")
    add("utf8_surrogate", envelope(obs_body(), src=b"\xa3\xed\xa0\x80"), "MalformedError")
    add("utf8_past_10ffff", envelope(obs_body(), src=b"\xa4\xf4\x90\x80\x80"), "MalformedError")
    add("utf8_truncated_sequence", envelope(obs_body(), src=b"\xa2\xe2\x82"), "MalformedError")
    add(
        "repeated_envelope_key",
        rmap(
            [
                ("version", 2),
                ("version", 2),
                ("topic", "obs"),
                ("seq", 0),
                ("src", "s"),
                ("stamps", {}),
                ("body", obs_body()),
            ]
        ),
        "MalformedError",
    )
    add("repeated_inner_key", envelope(obs_body(ints=[("a", 1), ("a", 2)])), "MalformedError")
    add("key_int", envelope(obs_body(ints=[(b"\x01", 1)])), "MalformedError")
    add("key_nil", envelope(obs_body(ints=[(b"\xc0", 1)])), "MalformedError")
    add("key_bool", envelope(obs_body(ints=[(b"\xc3", 1)])), "MalformedError")
    add("key_empty_array", envelope(obs_body(ints=[(b"\x90", 1)])), "MalformedError")
    add("key_timestamp", envelope(obs_body(ints=[(ext(-1, b"\0\0\0\1"), 1)])), "MalformedError")
    add(
        "key_float",
        envelope(obs_body(ints=[(b"\xcb" + struct.pack(">d", 1.0), 1)])),
        "MalformedError",
    )
    add("key_empty_bin_in_ints", envelope(obs_body(ints=[(b"\xc4\x00", 1)])), "SchemaError")
    add(
        "key_empty_bin_in_envelope",
        rmap(
            [
                (b"\xc4\x00", 1),
                ("version", 2),
                ("topic", "obs"),
                ("seq", 0),
                ("src", "s"),
                ("stamps", {}),
            ]
        ),
        "SchemaError",
    )
    add(
        "key_error_after_its_value",
        envelope(obs_body(ints=[(b"\xc0", ext(1, b"\x01"))])),
        "ArrayError",
    )
    add("bin_nonempty", envelope(obs_body(ints=[("a", b"\xc4\x01x")])), "MalformedError")
    add("array_nonempty", envelope(obs_body(ints=[("a", b"\x91\x01")])), "MalformedError")
    add(
        "str_over_65536",
        envelope(
            rmap([("cmd", "stop"), ("reason", b"\xdb" + struct.pack(">I", 65537) + b"r" * 65537)]),
            topic="command",
        ),
        "MalformedError",
    )
    add(
        "map_over_4096",
        envelope(
            rmap(
                [
                    ("node", "n"),
                    ("state", "ok"),
                    ("counters", {}),
                    ("gauges", {f"g{i}": i for i in range(4097)}),
                ]
            ),
            topic="health",
        ),
        "MalformedError",
    )
    add("depth_4_schema", nested(4), "SchemaError")
    add("depth_1024_schema", nested(1024), "SchemaError")
    add("depth_1025_malformed", nested(1025), "MalformedError")
    add(
        "depth_1025_empty_array",
        envelope(rmap([("values", b"\x80"), ("ints", _deep_list(1022))])),
        "MalformedError",
    )
    add(
        "depth_1024_empty_array",
        envelope(rmap([("values", b"\x80"), ("ints", _deep_list(1021))])),
        "SchemaError",
    )
    for code in (0, 3, 127, -2, -128):
        add(
            f"ext_type_{code}",
            envelope(obs_body(ints=[("a", ext(code, b"\x00"))])),
            "MalformedError",
        )
    add("timestamp_as_field", envelope(obs_body(ints=[("a", ext(-1, b"\0\0\0\1"))])), "SchemaError")
    add(
        "timestamp_8_as_field",
        envelope(obs_body(ints=[("a", ext(-1, struct.pack(">Q", (999999999 << 34) | 5)))])),
        "SchemaError",
    )
    add(
        "timestamp_12_as_version",
        envelope(obs_body(), version=ext(-1, struct.pack(">Iq", 5, -1))),
        "VersionError",
    )
    add(
        "timestamp_bad_payload",
        envelope(obs_body(ints=[("a", ext(-1, b"\0\0\0\0\0"))])),
        "MalformedError",
    )
    add(
        "timestamp_bad_nanoseconds",
        envelope(obs_body(ints=[("a", ext(-1, struct.pack(">Q", 1000000000 << 34)))])),
        "MalformedError",
    )
    add(
        "timestamp_12_bad_nanoseconds",
        envelope(obs_body(), version=ext(-1, struct.pack(">Iq", 10**9, 0))),
        "MalformedError",
    )
    # array headers and data (found while parsing: before the version)
    bad = lambda payload: envelope(obs_body([("a", ext(1, payload))]), version=9)  # noqa: E731
    add("array_short_header", bad(b"\x0a\x01\0\0"), "ArrayError")
    add("array_short_dims", bad(arr_payload(10, [1])[:12]), "ArrayError")
    add("array_ndim_9", bad(arr_payload(5, [1] * 9, b"\x01")), "ArrayError")
    add("array_dtype_12", bad(arr_payload(12, [1], b"\x01")), "ArrayError")
    add(
        "array_reserved_nonzero",
        bad(arr_payload(5, [1], b"\x01", reserved=b"\0\0\0\0\0\1")),
        "ArrayError",
    )
    add("array_data_short", bad(arr_payload(10, [2], b"\0" * 7)), "ArrayError")
    add("array_data_long", bad(arr_payload(10, [2], b"\0" * 9)), "ArrayError")
    add("array_dims_overflow", bad(arr_payload(5, [2**32, 2**32, 2], b"\0")), "ArrayError")
    add("array_bool_byte_2", bad(arr_payload(0, [2], b"\x01\x02")), "ArrayError")
    add("array_zero_size_dim_over_i64", bad(arr_payload(5, [2**63, 0])), "MalformedError")
    add("array_zero_size_too_big", bad(arr_payload(5, [2**62, 2, 0])), "MalformedError")
    add("array_zero_size_too_big_f64", bad(arr_payload(11, [0, 2**60])), "MalformedError")
    add(
        "ext2_in_single_frame",
        envelope(obs_body([("a", ext(2, arr_payload(5, [1], struct.pack("<Q", 1))))])),
        "MalformedError",
    )
    # multipart
    env1 = envelope(obs_body([("a", ext(2, arr_payload(5, [2], struct.pack("<Q", 1))))]))
    add("oob_ok_raw", [env1, b"\x01\x02"], "ok")
    add("oob_unreferenced_frame", [env1, b"\x01\x02", b"\x03"], "MalformedError")
    add("oob_frame_length", [env1, b"\x01\x02\x03"], "ArrayError")
    add(
        "oob_bool_byte",
        [envelope(obs_body([("a", ext(2, arr_payload(0, [1], struct.pack("<Q", 1))))])), b"\x05"],
        "ArrayError",
    )
    add(
        "oob_missing_frame",
        [envelope(obs_body([("a", ext(2, arr_payload(5, [2], struct.pack("<Q", 2))))])), b"\1\2"],
        "MalformedError",
    )
    add(
        "oob_frame_0",
        [envelope(obs_body([("a", ext(2, arr_payload(5, [2], struct.pack("<Q", 0))))])), b"\1\2"],
        "MalformedError",
    )
    twice = ext(2, arr_payload(5, [2], struct.pack("<Q", 1)))
    add(
        "oob_frame_twice",
        [envelope(obs_body([("a", twice), ("b", twice)])), b"\1\2"],
        "MalformedError",
    )
    add(
        "oob_payload_length",
        [
            envelope(obs_body([("a", ext(2, arr_payload(5, [2], struct.pack("<Q", 1) + b"\0")))])),
            b"\1\2",
        ],
        "ArrayError",
    )
    add("no_frames", [], "MalformedError")
    # version (the first field checked)
    for name, ver in (
        ("missing", None),
        ("1", 1),
        ("3", 3),
        ("float", 2.0),
        ("true", True),
        ("str", "2"),
        ("nil", None),
        ("empty_bin", b"\xc4\x00"),
        ("negative", -2),
    ):
        if name == "missing":
            msg = rmap(
                [("topic", "obs"), ("seq", 0), ("src", "s"), ("stamps", {}), ("body", obs_body())]
            )
        else:
            msg = envelope(obs_body(), version=ver if isinstance(ver, bytes) else p(ver))
        add(f"version_{name}", msg, "VersionError")
    add(
        "version_before_schema",
        envelope(rmap([("x", 1)]), version=3, topic="nonsense topic"),
        "VersionError",
    )
    # envelope fields
    add(
        "envelope_missing_key",
        rmap([("version", 2), ("topic", "obs"), ("seq", 0), ("src", "s"), ("stamps", {})]),
        "SchemaError",
    )
    add(
        "envelope_extra_key",
        rmap(
            [
                ("version", 2),
                ("topic", "obs"),
                ("seq", 0),
                ("src", "s"),
                ("stamps", {}),
                ("body", obs_body()),
                ("x", 1),
            ]
        ),
        "SchemaError",
    )
    for name, topic in (
        ("empty", ""),
        ("space", "obs x"),
        ("129", "o" * 129),
        ("non_ascii", "obsé"),
        ("tab", "obs\t"),
        ("int", 5),
    ):
        add(f"topic_name_{name}", envelope(obs_body(), topic=topic), "SchemaError")
    add("src_name_space", envelope(obs_body(), src="a b"), "SchemaError")
    add("src_name_del", envelope(obs_body(), src="a\x7f"), "SchemaError")
    add("seq_negative", envelope(obs_body(), seq=-1), "SchemaError")
    add("seq_float", envelope(obs_body(), seq=1.0), "SchemaError")
    add("seq_bool", envelope(obs_body(), seq=True), "SchemaError")
    add("stamp_negative", envelope(obs_body(), stamps=p({"capture": -1})), "SchemaError")
    add("stamp_over_i64", envelope(obs_body(), stamps=p({"capture": 2**63})), "SchemaError")
    add("stamp_float", envelope(obs_body(), stamps=p({"capture": 1.5})), "SchemaError")
    add("stamps_not_a_map", envelope(obs_body(), stamps=b"\x90"), "SchemaError")
    add("stamps_bin_key", envelope(obs_body(), stamps=rmap([(b"\xc4\x00", 1)])), "SchemaError")
    # topics
    for t in ("obsx", "/obs", "obs-x", "Obs"):
        add(
            f"topic_unknown_{t.replace('/', 'slash_')}", envelope(obs_body(), topic=t), "TopicError"
        )
    add(
        "topic_not_subscribed",
        envelope(obs_body(), topic="obs/cell2"),
        "TopicError",
        topics=["obs"],
    )
    add(
        "topic_subscribed",
        envelope(obs_body(), topic="obs/cell2"),
        "ok",
        topics=["obs", "obs/cell2"],
    )
    # bodies
    add("body_not_a_map", envelope(p(5)), "SchemaError")
    add(
        "body_unknown_field",
        envelope(rmap([("values", {}), ("ints", {}), ("x", 1)])),
        "SchemaError",
    )
    add("body_missing_field", envelope(rmap([("values", {})])), "SchemaError")
    # obs frames (docs/wire.md section 5): camera name -> {image uint8 [H, W, C], capture_ns}
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    good(
        "ok_obs_frames_inline",
        "obs",
        {
            **OBS_OK,
            "frames": {
                "overhead": {"image": img, "capture_ns": 990},
                "wrist": {"image": img[:1], "capture_ns": 0},
            },
        },
    )
    add(
        "ok_obs_frames_oob",
        [
            bytes(f)
            for f in wire.encode_frames(
                "obs",
                {**OBS_OK, "frames": {"overhead": {"image": img, "capture_ns": 990}}},
                seq=1,
                src="sim",
                oob_bytes=16,
            )
        ],
        "ok",
    )

    def fr(frames) -> bytes:
        return envelope(rmap([("values", {}), ("ints", {}), ("frames", frames)]))

    image = arr(img)
    add("obs_frames_empty", fr(rmap([])), "SchemaError")
    add("obs_frames_not_a_map", fr(p(1)), "SchemaError")
    add(
        "obs_frame_camera_space",
        fr(rmap([("over head", rmap([("image", image), ("capture_ns", 1)]))])),
        "SchemaError",
    )
    add("obs_frame_missing_capture", fr(rmap([("cam", rmap([("image", image)]))])), "SchemaError")
    add(
        "obs_frame_extra_field",
        fr(rmap([("cam", rmap([("image", image), ("capture_ns", 1), ("x", 1)]))])),
        "SchemaError",
    )
    add(
        "obs_frame_capture_negative",
        fr(rmap([("cam", rmap([("image", image), ("capture_ns", -1)]))])),
        "SchemaError",
    )
    for name, a in (
        ("float32", img.astype(np.float32)),
        ("2d", img[0]),
        ("4d", img[None]),
        ("empty", img[:0]),
    ):
        add(
            f"obs_frame_image_{name}",
            fr(rmap([("cam", rmap([("image", arr(a)), ("capture_ns", 1)]))])),
            "ArrayError",
        )
    oob = [
        bytes(f)
        for f in wire.encode_frames(
            "obs",
            {**OBS_OK, "frames": {"cam": {"image": img, "capture_ns": 1}}},
            seq=1,
            src="sim",
            oob_bytes=16,
        )
    ]
    add("obs_frame_oob_truncated", [oob[0], oob[1][:-1]], "ArrayError")
    ch = lambda **kw: envelope(chunk_body(**kw), topic="action_chunk")  # noqa: E731
    add("chunk_ok_raw", ch(), "ok")
    add("chunk_values_float64", ch(values=arr(np.zeros(4))), "ArrayError")
    add("chunk_values_2d", ch(values=arr(np.zeros((1, 4), np.float32)), tokens=None), "ArrayError")
    add("chunk_values_empty", ch(values=arr(np.zeros(0, np.float32)), tokens=None), "ArrayError")
    add("chunk_values_nan", ch(values=arr(np.array([0, np.nan, 0, 0], np.float32))), "ArrayError")
    add("chunk_values_inf", ch(values=arr(np.array([0, -np.inf, 0, 0], np.float32))), "ArrayError")
    add("chunk_values_int", ch(values=p(1)), "ArrayError")
    add("chunk_values_nil", ch(values=b"\xc0"), "ArrayError")
    add("chunk_tokens_float", ch(tokens=arr(np.zeros(4, np.float32))), "ArrayError")
    add("chunk_tokens_bool", ch(tokens=arr(np.zeros(4, bool))), "ArrayError")
    add("chunk_tokens_shape", ch(tokens=arr(np.zeros(3, np.int32))), "ArrayError")
    add("chunk_index_eq_count", ch(index=p(4)), "SchemaError")
    add("chunk_count_0", ch(count=p(0), index=p(0)), "SchemaError")
    add("chunk_period_0", ch(period_ns=p(0)), "SchemaError")
    add("chunk_start_negative", ch(start_ns=p(-1)), "SchemaError")
    add("chunk_start_over_i64", ch(start_ns=p(2**63)), "SchemaError")
    add("chunk_dest_bad_name", ch(dest=p("a b")), "SchemaError")
    add("chunk_spec_int", ch(spec=p(5)), "SchemaError")
    add("chunk_spec_empty_bin", ch(spec=b"\xc4\x00"), "SchemaError")
    add("chunk_cycle_nil", ch(cycle=b"\xc0"), "SchemaError")
    add("chunk_cycle_bool", ch(cycle=b"\xc2"), "SchemaError")
    add("chunk_cycle_float", ch(cycle=p(7.0)), "SchemaError")
    add("chunk_missing_spec", ch(spec=None), "SchemaError")

    def hb(echo):
        return envelope(rmap([("node", "m"), ("sent_ns", 1), ("echo", echo)]), topic="heartbeat")  # noqa: E731

    add("heartbeat_echo_missing", hb(p({"src": "a", "seq": 1, "sent_ns": 1})), "SchemaError")
    add(
        "heartbeat_echo_extra",
        hb(p({"src": "a", "seq": 1, "sent_ns": 1, "recv_ns": 2, "x": 0})),
        "SchemaError",
    )
    add("heartbeat_echo_not_map", hb(p(1)), "SchemaError")
    add(
        "heartbeat_echo_bad_src",
        hb(p({"src": "", "seq": 1, "sent_ns": 1, "recv_ns": 2})),
        "SchemaError",
    )
    add(
        "heartbeat_echo_recv_after_send",
        hb(p({"src": "a", "seq": 1, "sent_ns": 1, "recv_ns": 2})),
        "SchemaError",
    )
    health = lambda counters=b"\x80", gauges=b"\x80": envelope(  # noqa: E731
        rmap([("node", "n"), ("state", "ok"), ("counters", counters), ("gauges", gauges)]),
        topic="health",
    )
    add("health_counter_negative", health(counters=p({"a": -1})), "SchemaError")
    add("health_counter_float", health(counters=p({"a": 1.0})), "SchemaError")
    add(
        "health_gauge_nan",
        health(gauges=rmap([("g", b"\xcb" + struct.pack(">d", float("nan")))])),
        "SchemaError",
    )
    add(
        "health_gauge_inf32",
        health(gauges=rmap([("g", b"\xca" + struct.pack(">f", float("inf")))])),
        "SchemaError",
    )
    add("health_gauge_bool", health(gauges=rmap([("g", b"\xc3")])), "SchemaError")
    add("health_gauge_str", health(gauges=rmap([("g", "1")])), "SchemaError")
    add("health_counters_empty_array", health(counters=b"\x90"), "SchemaError")
    add(
        "command_unknown",
        envelope(rmap([("cmd", "jump"), ("reason", "")]), topic="command"),
        "SchemaError",
    )
    add(
        "budget_negative",
        envelope(rmap([("level", -1), ("reason", "")]), topic="budget"),
        "SchemaError",
    )
    add(
        "trace_stamp_negative",
        envelope(
            rmap([("node", "n"), ("cycle", 0), ("stamps", {"a": -5}), ("fields", {})]),
            topic="trace",
        ),
        "SchemaError",
    )
    add("obs_int_over_i64", envelope(obs_body(ints=[("a", 2**63)])), "SchemaError")
    add("obs_int_nil", envelope(obs_body(ints=[("a", b"\xc0")])), "SchemaError")
    add("obs_value_not_array", envelope(obs_body([("a", p(1))])), "ArrayError")
    add("obs_value_empty_bin", envelope(obs_body([("a", b"\xc4\x00")])), "ArrayError")
    add(
        "obs_value_nan_f16",
        envelope(obs_body([("a", ext(1, arr_payload(9, [1], b"\x00\x7e")))])),
        "ArrayError",
    )
    add("obs_value_inf_f64", envelope(obs_body([("a", arr(np.array([np.inf])))])), "ArrayError")
    add("obs_values_not_map", envelope(rmap([("values", b"\x90"), ("ints", {})])), "SchemaError")
    # real-time chunking: an obs's committed prefix, a chunk's conditioned (docs/wire.md section 5)
    plan = tok.decode(np.array([[100, 50, 20, 255], [101, 50, 20, 255]], np.int32))
    good(
        "ok_obs_committed",
        "obs",
        {**OBS_OK, "committed": {"chunk": 6, "from": 1, "values": plan, "start_ns": 51_000}},
    )
    named = {"chunk": 6, "from": 1, "n": 2, "hash": prefix_hash(plan)}
    good("ok_action_chunk_conditioned", "action_chunk", {**chunk, "conditioned": named})
    good("ok_action_chunk_continuous_conditioned", "action_chunk", {**cont, "conditioned": named})
    cm = lambda c: envelope(rmap([("values", {}), ("ints", {}), ("committed", c)]))  # noqa: E731
    ok_c = [("chunk", p(6)), ("from", p(1)), ("values", arr(plan)), ("start_ns", p(51_000))]
    add(
        "obs_committed_values_1d",
        cm(rmap([*ok_c[:2], ("values", arr(plan[0])), ok_c[3]])),
        "ArrayError",
    )
    add(
        "obs_committed_values_float64",
        cm(rmap([*ok_c[:2], ("values", arr(plan.astype(np.float64))), ok_c[3]])),
        "ArrayError",
    )
    add(
        "obs_committed_values_empty",
        cm(rmap([*ok_c[:2], ("values", arr(plan[:0])), ok_c[3]])),
        "ArrayError",
    )
    add(
        "obs_committed_values_nan",
        cm(rmap([*ok_c[:2], ("values", arr(plan * np.float32(np.nan))), ok_c[3]])),
        "ArrayError",
    )
    add("obs_committed_missing_start", cm(rmap(ok_c[:3])), "SchemaError")
    add("obs_committed_extra", cm(rmap([*ok_c, ("n", p(2))])), "SchemaError")
    add(
        "obs_committed_from_negative",
        cm(rmap([ok_c[0], ("from", p(-1)), *ok_c[2:]])),
        "SchemaError",
    )
    add("obs_committed_not_map", cm(arr(plan)), "SchemaError")
    nm = [("chunk", p(6)), ("from", p(1)), ("n", p(2)), ("hash", p(named["hash"]))]
    add("chunk_conditioned_raw", ch(conditioned=rmap(nm)), "ok")
    add("chunk_conditioned_n_0", ch(conditioned=rmap([*nm[:2], ("n", p(0)), nm[3]])), "SchemaError")
    add(
        "chunk_conditioned_hash_upper",
        ch(conditioned=rmap([*nm[:3], ("hash", p(named["hash"].upper()))])),
        "SchemaError",
    )
    add(
        "chunk_conditioned_hash_short",
        ch(conditioned=rmap([*nm[:3], ("hash", p(named["hash"][:15]))])),
        "SchemaError",
    )
    add("chunk_conditioned_missing_hash", ch(conditioned=rmap(nm[:3])), "SchemaError")
    add("chunk_conditioned_not_map", ch(conditioned=p(1)), "SchemaError")
    # overload (docs/wire.md section 5): an obs's open_loop_ns, a chunk's executes, obs_period_ns
    good("ok_obs_open_loop", "obs", {**OBS_OK, "open_loop_ns": 500_000_000})
    good(
        "ok_action_chunk_asks",
        "action_chunk",
        {**chunk, "executes": 2, "obs_period_ns": 100_000_000},
    )
    good(
        "ok_action_chunk_conditioned_asks",
        "action_chunk",
        {**cont, "conditioned": named, "executes": 1},
    )
    ol = lambda v: envelope(rmap([("values", {}), ("ints", {}), ("open_loop_ns", v)]))  # noqa: E731
    add("obs_open_loop_0", ol(p(0)), "SchemaError")
    add("obs_open_loop_float", ol(p(1.0)), "SchemaError")
    add("chunk_executes_0", ch(executes=p(0)), "SchemaError")
    add("chunk_executes_over_count", ch(executes=p(5)), "SchemaError")  # count is 4
    add("chunk_executes_count", ch(executes=p(4)), "ok")
    add("chunk_obs_period_0", ch(obs_period_ns=p(0)), "SchemaError")
    add("chunk_obs_period_over_i64", ch(obs_period_ns=p(2**63)), "SchemaError")
    return v


def _deep_list(depth: int) -> bytes:
    """Maps `depth` deep ending in an empty msgpack array: one container past the limit."""
    inner = b"\x90"
    for _ in range(depth):
        inner = rmap([("k", inner)])
    return inner


# --- the framing vectors: ZeroMQ frame 0 (plain or addressed) with the envelope ---------------
def framing_vectors():
    """(name, topic frame, frames, subscribed topics, to, verdict): what a receiver subscribed
    to `topics` (and, of a topic in `to`, to that address only) does with the message."""
    obs = envelope(obs_body())
    cmd = envelope(rmap([("cmd", p("safe_hold")), ("reason", p("test"))]), topic="command")
    chunk = envelope(chunk_body(), topic="action_chunk", src="inf")
    other = envelope(chunk_body(dest=p("cell-10")), topic="action_chunk", src="inf")
    return [
        ("framing_plain_obs", b"obs", [obs], ["obs"], None, "ok"),
        ("framing_addressed_obs_without_dest", b"obs\0cell-1\0", [obs], ["obs"], None, "rejected"),
        (
            "framing_addressed_command_without_dest",
            b"command\0cell-1\0",
            [cmd],
            ["command"],
            None,
            "rejected",
        ),
        (
            "framing_addressed_chunk_plain_subscriber",
            b"action_chunk\0arm\0",
            [chunk],
            ["action_chunk"],
            None,
            "ok",
        ),
        (
            "framing_addressed_chunk_its_robot",
            b"action_chunk\0arm\0",
            [chunk],
            ["action_chunk"],
            {"action_chunk": "arm"},
            "ok",
        ),
        (
            "framing_addressed_chunk_dest_differs",
            b"action_chunk\0arm\0",
            [other],
            ["action_chunk"],
            None,
            "rejected",
        ),
        ("framing_plain_chunk_with_dest", b"action_chunk", [chunk], ["action_chunk"], None, "ok"),
        (
            "framing_address_without_closing_nul",
            b"action_chunk\0arm",
            [chunk],
            ["action_chunk"],
            None,
            "rejected",
        ),
        (
            "framing_address_with_a_second_nul",
            b"action_chunk\0a\0rm\0",
            [chunk],
            ["action_chunk"],
            None,
            "rejected",
        ),
        (
            "framing_topic_frame_differs_from_envelope",
            b"command",
            [obs],
            ["obs", "command"],
            None,
            "rejected",
        ),
    ]


def framing_verdict(topic_frame: bytes, frames, topics, to) -> str:
    """The reference bus's rules (rtinfer.transport.bus: intake and topics), as a function."""
    from rtinfer.transport.bus.topics import dest_ok, parse_addressed

    by_bytes = {t.encode(): t for t in topics}
    topic, dest = by_bytes.get(topic_frame), None
    if topic is None:
        topic, dest = parse_addressed(topic_frame, by_bytes, to or {})
        if topic is None:
            return "rejected"
    try:
        env = wire.decode_frames(frames, topics=topics)
    except wire.WireError:
        return "rejected"
    return "ok" if env.topic == topic and dest_ok(env.body, dest) else "rejected"


def reference_verdict(frames, extra) -> str:
    try:
        wire.decode_frames(
            frames,
            max_bytes=extra.get("max_bytes", wire.DEFAULT_MAX_BYTES),
            topics=extra.get("topics"),
        )
    except wire.WireError as e:
        return type(e).__name__
    return "ok"


def render(v):
    """The decoded form a test compares: scalars as tagged strings, maps as [key, value]
    lists in wire order, arrays as [dtype, shape, data hex] (README.md)."""
    if isinstance(v, dict):
        return {"map": [[k, render(x)] for k, x in v.items()]}
    if isinstance(v, np.ndarray):
        return {"array": [v.dtype.name, [str(d) for d in v.shape], v.tobytes().hex()]}
    if isinstance(v, bool):
        raise TypeError("no bool in a decoded message")
    if isinstance(v, int):
        return f"i{v}"
    if isinstance(v, float):
        return "f" + struct.pack(">d", v).hex()
    if isinstance(v, str):
        return "s" + v
    raise TypeError(f"cannot render {type(v).__name__}")


def render_envelope(env) -> dict:
    return {
        "topic": env.topic,
        "seq": str(env.seq),
        "src": env.src,
        "stamps": [[k, str(t)] for k, t in env.stamps.items()],
        "body": render(env.body),
    }


# --- the controller vectors -----------------------------------------------------------------
T0 = 1_000_000_000_000  # the controller's clock at the start of every case (ns)
MS = 1_000_000
CONFIG = {
    "robot": "arm",
    "name": "ctl",
    "deadline_ns": 100 * MS,
    "chunk_interval_ns": 50 * MS,
    "max_period_ns": 1_000_000_000,
    "open_loop_ns": 1_000_000_000,
    "tokenizer": "models/zoo/conveyor-v1/tokenizer.json",
    "action": "models/zoo/conveyor-act/action_spec.json",
}


def waypoint(
    index=0,
    *,
    cycle=1,
    count=4,
    capture=T0,
    dest="arm",
    spec=None,
    tokens=True,
    values=None,
    period=50 * MS,
    start=50 * MS,
    token_ids=None,
    stamps=None,
    src="inf",
    conditioned=None,
    executes=None,
):
    """One action_chunk message (bytes) for the controller vectors; conditioned: (chunk,
    from, n) of a committed prefix of the stock waypoints (hash of their values), or a map;
    executes: an executed horizon."""
    tok = ActionTokenizer(TOKENIZER)
    ids = np.asarray(token_ids if token_ids is not None else [100 + index, 50, 20, 255], np.int32)
    body = {
        "cycle": cycle,
        "index": index,
        "count": count,
        "dest": dest,
        "period_ns": period,
        "start_ns": start,
    }
    if tokens:
        body["tokens"] = ids
        body["values"] = tok.decode(np.clip(ids, 0, 255)) if values is None else values
        body["spec"] = TOKENIZER.hash if spec is None else spec
    else:
        body["values"] = np.array([0.1, 0.2, 0.4, 1.0], np.float32) if values is None else values
        body["spec"] = ACTION.hash if spec is None else spec
    if isinstance(conditioned, tuple):
        c, f, n = conditioned
        ids_of = np.array([[100 + i, 50, 20, 255] for i in range(f, f + n)], np.int32)
        conditioned = {"chunk": c, "from": f, "n": n, "hash": prefix_hash(tok.decode(ids_of))}
    if conditioned is not None:
        body["conditioned"] = conditioned
    if executes is not None:
        body["executes"] = executes
    st = {"capture": capture} if stamps is None else stamps
    st = (
        {**st, "obs_recv": capture + MS, "first_token": capture + 2 * MS} if "capture" in st else st
    )
    return wire.encode("action_chunk", body, seq=index, src=src, stamps=st)


def command(cmd: str) -> bytes:
    return wire.encode("command", {"cmd": cmd, "reason": "test"}, seq=0, src="monitor")


def controller_cases():
    """(name, [(now offset ns, message bytes or None, {counter: delta}, state, trace
    [, apply offset ns: when the tick commits a new chunk's first setpoint, default now])])."""
    A, W = "chunks_accepted", "waypoints_accepted"
    first = {A: 1, W: 1}
    more = {W: 1}
    half = ActionTokenizer(TOKENIZER).bin_width / 2
    centre = ActionTokenizer(TOKENIZER).decode(np.array([100, 50, 20, 255], np.int32))
    CC, PM, EX = "chunks_conditioned", "prefix_mismatch", "chunks_executes"
    plan_of_cycle_1 = [(1 * MS, waypoint(0), first, "run", "apply")] + [
        (1 * MS + i, waypoint(i), more, "run", None) for i in (1, 2, 3)
    ]
    # the same, arriving 41 ms after capture: the watchdog is quiet until 191 ms
    late_plan = [(41 * MS, waypoint(0), first, "run", "apply")] + [
        (41 * MS + i, waypoint(i), more, "run", None) for i in (1, 2, 3)
    ]
    return [
        (
            "token_chunk_streams",
            [
                (10 * MS, waypoint(0), first, "run", "apply"),
                (11 * MS, waypoint(1), more, "run", None),
                (12 * MS, waypoint(2), more, "run", None),
                (13 * MS, waypoint(3), more, "run", None),
            ],
        ),
        (
            "continuous_chunk",
            [
                (10 * MS, waypoint(0, tokens=False), first, "run", "apply"),
                (
                    11 * MS,
                    waypoint(1, tokens=False, values=np.array([1, 2, 3], np.float32)),
                    {"rejected_bad": 1},
                    "run",
                    None,
                ),
            ],
        ),
        (
            "dest_and_hash",
            [
                (10 * MS, waypoint(0, dest="other"), {"rejected_dest": 1}, "idle", None),
                (10 * MS, waypoint(0, spec="0000000000000000"), {"rejected_hash": 1}, "idle", None),
                (10 * MS, waypoint(0, spec=ACTION.hash), {"rejected_hash": 1}, "idle", None),
                (
                    10 * MS,
                    waypoint(0, tokens=False, spec=TOKENIZER.hash),
                    {"rejected_hash": 1},
                    "idle",
                    None,
                ),
                (10 * MS, waypoint(0, dest="other", spec="x"), {"rejected_dest": 1}, "idle", None),
            ],
        ),
        (
            "deadline",
            [
                (
                    100 * MS + 1,
                    waypoint(0),
                    {"rejected_stale": 1, "late_waypoints": 1},
                    "idle",
                    "late",
                ),
                (
                    100 * MS + 2,
                    waypoint(1),
                    {"rejected_stale": 1, "late_waypoints": 1},
                    "idle",
                    None,
                ),
                (100 * MS, waypoint(0, cycle=2), first, "run", "apply"),
                (200 * MS, waypoint(0, cycle=3, capture=T0 + 100 * MS), first, "run", "apply"),
            ],
        ),
        (
            "capture_checks",
            [
                (0, waypoint(0, capture=T0 + 1), {"rejected_bad": 1}, "idle", None),
                (0, waypoint(0, capture=T0 + 100 * MS + 1), {"rejected_bad": 1}, "idle", None),
                (0, waypoint(0, stamps={"publish": T0}), {"rejected_bad": 1}, "idle", None),
                (0, waypoint(0, capture=T0), first, "run", "apply"),
            ],
        ),
        (
            "a_future_capture_never_outranks_an_honest_one",
            [
                (0, waypoint(0, cycle=1, capture=T0 + 50 * MS), {"rejected_bad": 1}, "idle", None),
                (1 * MS, waypoint(0, cycle=2, capture=T0), first, "run", "apply"),
            ],
        ),
        (
            "field_checks",
            [
                (1 * MS, waypoint(0, count=5), {"rejected_bad": 1}, "idle", None),
                (1 * MS, waypoint(0, period=1_000_000_001), {"rejected_bad": 1}, "idle", None),
                (1 * MS, waypoint(0, start=1_000_000_001), {"rejected_bad": 1}, "idle", None),
                (1 * MS, waypoint(0, token_ids=[256, 0, 0, 0]), {"rejected_bad": 1}, "idle", None),
                (1 * MS, waypoint(0, token_ids=[-1, 0, 0, 0]), {"rejected_bad": 1}, "idle", None),
                (
                    1 * MS,
                    waypoint(
                        0, values=(centre + np.float32([half[0] * 1.5, 0, 0, 0])).astype(np.float32)
                    ),
                    {"rejected_bad": 1},
                    "idle",
                    None,
                ),
                (
                    1 * MS,
                    waypoint(
                        0, values=(centre + np.float32([half[0] * 0.9, 0, 0, 0])).astype(np.float32)
                    ),
                    first,
                    "run",
                    "apply",
                ),
                (
                    1 * MS,
                    waypoint(1, period=1_000_000_000, start=1_000_000_000),
                    {"rejected_bad": 1},
                    "run",
                    None,
                ),
                (1 * MS, waypoint(1, count=3), {"rejected_bad": 1}, "run", None),
                (1 * MS, waypoint(0), {"rejected_bad": 1}, "run", None),
                (1 * MS, waypoint(1), more, "run", None),
            ],
        ),
        (
            "token_dims",
            [
                (
                    1 * MS,
                    wire.encode(
                        "action_chunk",
                        {
                            "cycle": 1,
                            "index": 0,
                            "count": 4,
                            "dest": "arm",
                            "values": np.zeros(3, np.float32),
                            "tokens": np.zeros(3, np.int32),
                            "spec": TOKENIZER.hash,
                            "period_ns": 50 * MS,
                            "start_ns": 50 * MS,
                        },
                        seq=0,
                        src="inf",
                        stamps={"capture": T0},
                    ),
                    {"rejected_bad": 1},
                    "idle",
                    None,
                ),
                (
                    1 * MS,
                    waypoint(0, token_ids=np.array([100, 50, 20, 255], np.uint8)),
                    first,
                    "run",
                    "apply",
                ),
            ],
        ),
        (
            "out_of_order_and_older",
            [
                (1 * MS, waypoint(1), first, "idle", None),
                (2 * MS, waypoint(0), more, "run", "apply"),
                (3 * MS, waypoint(0, cycle=0, capture=T0 - 1), {"rejected_stale": 1}, "run", None),
                (4 * MS, waypoint(0, cycle=1, capture=T0 + 1), first, "run", "apply"),
                # another src is another chunk: not older than the one in use, so it replaces it
                (5 * MS, waypoint(0, cycle=1, capture=T0 + 1, src="other"), first, "run", "apply"),
                (
                    5 * MS,
                    waypoint(2, cycle=1, capture=T0 + 1, src="other"),
                    {W: 1, A: 0},
                    "run",
                    None,
                ),
            ],
        ),
        (
            "commands_and_hold",
            [
                (1 * MS, waypoint(0), first, "run", "apply"),
                (2 * MS, command("safe_hold"), {"commands": 1, "holds": 1}, "safe_hold", None),
                (3 * MS, waypoint(1), {"rejected_hold": 1}, "safe_hold", None),
                (101 * MS, waypoint(2), {"rejected_stale": 1}, "safe_hold", None),
                (4 * MS, waypoint(1, dest="x"), {"rejected_dest": 1}, "safe_hold", None),
                (5 * MS, command("clear"), {"commands": 1}, "hold", None),
                (6 * MS, command("clear"), {"commands": 1}, "hold", None),
                (7 * MS, waypoint(0, cycle=2, capture=T0 + 5 * MS), first, "run", "apply"),
                (8 * MS, command("stop"), {"commands": 1, "holds": 1}, "stopped", None),
                (9 * MS, command("clear"), {"commands": 1}, "stopped", None),
                (
                    10 * MS,
                    waypoint(0, cycle=3, capture=T0 + 9 * MS),
                    {"rejected_hold": 1},
                    "stopped",
                    None,
                ),
            ],
        ),
        # taken in time, but the tick's own work (messages, read()) took it past the deadline
        # by the time its first setpoint would be committed: dropped, reported late, held
        (
            "late_at_apply",
            [
                (
                    99 * MS,
                    waypoint(0),
                    {A: 1, W: 1, "late_applies": 1},
                    "idle",
                    "late",
                    100 * MS + 1,
                ),
                (
                    100 * MS + 2,
                    waypoint(1),
                    {"rejected_stale": 1, "late_waypoints": 1},
                    "idle",
                    None,
                ),
                (
                    150 * MS,
                    waypoint(0, cycle=2, capture=T0 + 100 * MS),
                    first,
                    "run",
                    "apply",
                    200 * MS,
                ),
                (
                    249 * MS,
                    waypoint(0, cycle=3, capture=T0 + 150 * MS),
                    {A: 1, W: 1, "late_applies": 1, "holds": 1},
                    "hold",
                    "late",
                    250 * MS + 1,
                ),
                (260 * MS, waypoint(0, cycle=4, capture=T0 + 250 * MS), first, "run", "apply"),
            ],
        ),
        # real-time chunking (docs/wire.md section 5): a chunk conditioned on waypoints 1..2 of
        # the chunk in use is fresh until its waypoint 2 is due (capture + 50 + 2 * 50 ms),
        # past the 100 ms deadline, and joins only the plan it names
        (
            "rtc_conditioned_chunk_joins_past_the_deadline",
            [
                *plan_of_cycle_1,
                (
                    180 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                    {**first, CC: 1},
                    "run",
                    "apply",
                ),
                (
                    181 * MS,
                    waypoint(1, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                    more,
                    "run",
                    None,
                ),
                # an unconditioned chunk as old is stale, as for a robot that sends no prefix
                (
                    182 * MS,
                    waypoint(0, cycle=3, capture=T0 + 60 * MS + 1),
                    {"rejected_stale": 1, "late_waypoints": 1},
                    "run",
                    "late",
                ),
            ],
        ),
        (
            "rtc_conditioned_chunk_past_its_prefix_is_stale",
            [
                *late_plan,
                (
                    190 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                    {"rejected_stale": 1, "late_waypoints": 1},
                    "run",
                    "late",
                ),
                (
                    190 * MS,
                    waypoint(0, cycle=3, capture=T0 + 41 * MS, conditioned=(1, 1, 2)),
                    first | {CC: 1},
                    "run",
                    "apply",
                ),
            ],
        ),
        (
            "rtc_prefix_mismatch",
            [
                (1 * MS, waypoint(0, conditioned=(0, 1, 2)), {PM: 1}, "idle", None),
                *plan_of_cycle_1[:1],
                *plan_of_cycle_1[1:],
                (
                    50 * MS,
                    waypoint(
                        0,
                        cycle=2,
                        capture=T0 + 40 * MS,
                        conditioned={"chunk": 1, "from": 1, "n": 2, "hash": "0123456789abcdef"},
                    ),
                    {PM: 1},
                    "run",
                    None,
                ),
                (
                    50 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(9, 1, 2)),
                    {PM: 1},
                    "run",
                    None,
                ),
                # waypoints 2..3 are chunk 1's, but not those due with this chunk's waypoint 0
                (
                    50 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 2, 2)),
                    {PM: 1},
                    "run",
                    None,
                ),
                (
                    50 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 3, 2)),
                    {PM: 1},
                    "run",
                    None,
                ),
                (151 * MS + 1, None, {"holds": 1}, "hold", None),
                # held: the robot no longer executes chunk 1, so nothing conditioned on it joins
                (
                    160 * MS,
                    waypoint(0, cycle=3, capture=T0 + 100 * MS, conditioned=(1, 1, 2)),
                    {PM: 1},
                    "hold",
                    None,
                ),
                (161 * MS, waypoint(0, cycle=4, capture=T0 + 100 * MS), first, "run", "apply"),
            ],
        ),
        (
            "rtc_reordered_and_duplicated",
            [
                *plan_of_cycle_1,
                (
                    100 * MS,
                    waypoint(0, cycle=3, capture=T0 + 90 * MS, conditioned=(2, 1, 2)),
                    {PM: 1},
                    "run",
                    None,
                ),
                (
                    101 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                    first | {CC: 1},
                    "run",
                    "apply",
                ),
                *[
                    (
                        102 * MS + i,
                        waypoint(i, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                        more,
                        "run",
                        None,
                    )
                    for i in (1, 2, 3)
                ],
                (
                    103 * MS,
                    waypoint(0, cycle=3, capture=T0 + 90 * MS, conditioned=(2, 1, 2)),
                    first | {CC: 1},
                    "run",
                    "apply",
                ),
                (
                    104 * MS,
                    waypoint(0, cycle=3, capture=T0 + 90 * MS, conditioned=(2, 1, 2)),
                    {"rejected_bad": 1},
                    "run",
                    None,
                ),
                (
                    105 * MS,
                    waypoint(1, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                    {"rejected_stale": 1},
                    "run",
                    None,
                ),
            ],
        ),
        (
            "rtc_late_at_apply",
            [
                *plan_of_cycle_1,
                (
                    185 * MS,
                    waypoint(0, cycle=2, capture=T0 + 40 * MS, conditioned=(1, 1, 2)),
                    {A: 1, W: 1, CC: 1, "late_applies": 1, "holds": 1},
                    "hold",
                    "late",
                    190 * MS,
                ),
                (186 * MS, waypoint(0, cycle=3, capture=T0 + 150 * MS), first, "run", "apply"),
            ],
        ),
        # overload (docs/wire.md section 5): a chunk with an executed horizon of 4 waypoints is
        # fresh, and the plan, until its waypoint 3 is due (capture + 50 + 3 * 50 ms), past the
        # deadline, and never past it (the robot's open loop, 1 s, does not bind)
        (
            "executes_fresh_past_the_deadline_until_its_horizon",
            [
                (150 * MS, waypoint(0, executes=4), first | {EX: 1}, "run", "apply"),
                (151 * MS, waypoint(1, executes=4), more, "run", None),
                (
                    200 * MS,
                    waypoint(0, cycle=2, capture=T0 + MS, executes=4),
                    first | {EX: 1},
                    "run",
                    "apply",
                ),
                # as old as its horizon: stale; and the chunk in use's horizon ends now: a hold
                (
                    201 * MS,
                    waypoint(0, cycle=3, capture=T0 + MS, executes=4),
                    {"rejected_stale": 1, "late_waypoints": 1, "holds": 1},
                    "hold",
                    "late",
                ),
                # without a horizon, as old: stale, as for a robot that was asked nothing
                (
                    202 * MS,
                    waypoint(0, cycle=4, capture=T0 + 60 * MS),
                    {"rejected_stale": 1, "late_waypoints": 1},
                    "hold",
                    "late",
                ),
            ],
        ),
        (
            "executes_the_plan_lasts_its_horizon_and_not_past_it",
            [
                (10 * MS, waypoint(0, executes=4), first | {EX: 1}, "run", "apply"),
                (161 * MS, None, {}, "run", None),  # past the deadline and interval after it came
                (199 * MS, None, {}, "run", None),
                (200 * MS, None, {"holds": 1}, "hold", None),
                (201 * MS, waypoint(0, cycle=2, capture=T0 + 150 * MS), first, "run", "apply"),
                (352 * MS, None, {"holds": 1}, "hold", None),
            ],
        ),  # no horizon: deadline + interval
        (
            "watchdog",
            [
                (1 * MS, waypoint(0), first, "run", "apply"),
                (151 * MS, None, {}, "run", None),
                (151 * MS + 1, None, {"holds": 1}, "hold", None),
                (152 * MS, None, {}, "hold", None),
                (153 * MS, waypoint(0, cycle=2, capture=T0 + 100 * MS), first, "run", "apply"),
            ],
        ),
    ]


MAX_DECODED_CHARS = 4000
COUNTER_NAMES = (
    "chunks_accepted",
    "waypoints_accepted",
    "rejected_stale",
    "late_waypoints",
    "late_applies",
    "rejected_bad",
    "rejected_hash",
    "rejected_dest",
    "rejected_hold",
    "holds",
    "commands",
    "chunks_conditioned",
    "prefix_mismatch",
    "chunks_executes",
)


def write(out: Path) -> dict:
    msg = out / "msg"
    msg.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": "rtinfer-wire-vectors",
        "version": 1,
        "about": "tests/vectors/README.md; generated by tests/vectors/make_vectors.py",
        "decode": [],
        "controller": {"config": CONFIG, "counters": list(COUNTER_NAMES), "t0_ns": T0, "cases": []},
    }
    for name, frames, verdict, extra in decode_vectors():
        got = reference_verdict(frames, extra)
        if got != verdict:
            raise SystemExit(
                f"vector {name}: the reference decoder says {got}, the vector {verdict}"
            )
        files = []
        for i, f in enumerate(frames):
            fname = f"msg/{name}.bin" if len(frames) == 1 else f"msg/{name}.{i}.bin"
            (out / fname).write_bytes(f)
            files.append(fname)
        entry = {"name": name, "frames": files, "verdict": verdict, **extra}
        if verdict == "ok":  # what it decodes to, where that is short enough to keep
            decoded = render_envelope(wire.decode_frames(frames, topics=extra.get("topics")))
            if len(json.dumps(decoded)) <= MAX_DECODED_CHARS:
                entry["decoded"] = decoded
        manifest["decode"].append(entry)
    manifest["framing"] = []
    for name, topic_frame, frames, topics, to, verdict in framing_vectors():
        got = framing_verdict(topic_frame, frames, topics, to)
        if got != verdict:
            raise SystemExit(f"vector {name}: the reference bus says {got}, the vector {verdict}")
        files = [f"msg/{name}.topic.bin"]
        (out / files[0]).write_bytes(topic_frame)
        for i, f in enumerate(frames):
            files.append(f"msg/{name}.{i}.bin")
            (out / files[-1]).write_bytes(f)
        manifest["framing"].append(
            {
                "name": name,
                "frames": files,
                "topics": topics,
                **({"to": to} if to else {}),
                "verdict": verdict,
            }
        )
    for name, steps in controller_cases():
        out_steps = []
        for k, (dt, data, delta, state, trace, *apply_dt) in enumerate(steps):
            step = {
                "now_ns": T0 + dt,
                "frames": [],
                "expect": {c: delta.get(c, 0) for c in COUNTER_NAMES},
                "state": state,
                "trace": trace,
            }
            if apply_dt:
                step["apply_ns"] = T0 + apply_dt[0]
            if data is not None:
                env = wire.decode(data)
                fname = f"msg/ctl_{name}_{k}.bin"
                (out / fname).write_bytes(data)
                step["frames"] = [fname]
                step["topic"] = env.topic
            out_steps.append(step)
        manifest["controller"]["cases"].append({"name": name, "steps": out_steps})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def differences(a: Path, b: Path) -> list[str]:
    """Files that differ between two vector directories (manifest and msg/)."""

    def names(d):
        return {
            str(f.relative_to(d))
            for f in d.rglob("*")
            if f.is_file()  # noqa: E731
            and f.name in ("manifest.json",)
            or f.suffix == ".bin"
        }

    fa, fb = names(a), names(b)
    return sorted((fa ^ fb) | {n for n in fa & fb if (a / n).read_bytes() != (b / n).read_bytes()})


def main(argv: list[str]) -> int:
    if "--check" in argv:
        with tempfile.TemporaryDirectory() as tmp:
            write(Path(tmp))
            diff = differences(Path(tmp), HERE)
        if diff:
            print(
                f"tests/vectors is out of date ({len(diff)} files differ, e.g. {diff[:3]}): run "
                ".venv/bin/python tests/vectors/make_vectors.py",
                file=sys.stderr,
            )
            return 1
        return 0
    for old in (HERE / "msg").glob("*.bin"):
        old.unlink()
    m = write(HERE)
    n_steps = sum(len(c["steps"]) for c in m["controller"]["cases"])
    print(
        f"{len(m['decode'])} decode vectors, {len(m['controller']['cases'])} controller cases "
        f"({n_steps} steps) in {HERE}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
