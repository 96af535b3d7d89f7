"""docs/wire.md against the code: the values the doc states are parsed out of it (marked
tables, fixed sentences) and checked against real messages, so the two cannot drift apart.

Covered: the section 5 `obs` example (a real conveyor observation), the section 7 table of
error classes (each cell against the decoder), the nesting-depth limit (just inside and
just past it), which topics are valid (`obs/` included), `seq` per publishing socket across
topics and the per-hop stamps (a real bus Publisher/Subscriber over ipc). The section 8 hex
example is tests/test_wire.py's.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import msgpack
import numpy as np
import pytest

from rtinfer.transport import wire
from rtinfer.transport.action_chunk import carried_stamps, waypoint_body
from rtinfer.transport.schema import (
    ArrayError,
    MalformedError,
    SchemaError,
    TopicError,
    VersionError,
    WireError,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "wire.md"
ERRORS = {
    c.__name__: c for c in (MalformedError, SchemaError, ArrayError, VersionError, TopicError)
}


def doc() -> str:
    return DOC.read_text()


def marked_table(marker: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table right after `<!-- marker -->`."""
    m = re.search(rf"<!-- {re.escape(marker)} -->\s*\n((?:\|.*\|\n)+)", doc())
    assert m, f"docs/wire.md has no table marked <!-- {marker} -->"
    lines = m.group(1).strip().splitlines()
    assert re.fullmatch(r"\|(\s*-+\s*\|)+", lines[1]), "second line must be the separator"
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[2:]]


def section(n: int) -> str:
    """The text of section n (from its `## n.` heading to the next heading of that level)."""
    m = re.search(rf"^## {n}\. .*?(?=^## |\Z)", doc(), re.M | re.S)
    assert m, f"docs/wire.md has no section {n}"
    return m.group(0)


def unquote(cell: str) -> str:
    return cell.strip().strip("`")


def depth(obj) -> int:
    """Nesting depth of decoded maps (arrays are ext values: leaves)."""
    if isinstance(obj, dict):
        return 1 + max((depth(v) for v in obj.values()), default=0)
    return 0


# --- section 5: the obs example ------------------------------------------------------------


def shape_of(text: str, sizes: dict[str, int]) -> tuple[int, ...]:
    """A doc table's shape, e.g. "(K, 4)" or "(8,)", with its letters read from `sizes`."""
    dims = [d.strip() for d in text.strip().strip("()").split(",") if d.strip()]
    return tuple(sizes[d] if d in sizes else int(d) for d in dims)


def test_obs_example_is_the_conveyor_cells_observation():
    from examples.conveyor_sorting.config import CellConfig
    from examples.conveyor_sorting.env import ConveyorSortEnv
    from examples.conveyor_sorting.observe import obs_body

    text = doc()
    k = int(re.search(r"K = `visible_k` = (\d+) object slots", text).group(1))
    c = int(re.search(r"C = (\d+) object classes", text).group(1))
    cfg = CellConfig()
    assert (k, c) == (cfg.visible_k, cfg.num_classes), "the doc's defaults are not CellConfig's"

    obs, _ = ConveyorSortEnv().reset(seed=0)
    body = obs_body(obs)
    rows = marked_table("obs-example")
    want: dict[str, dict[str, tuple[str, str]]] = {"values": {}, "ints": {}}
    for map_name, key, dtype, shape, _contents in rows:
        want[unquote(map_name)][unquote(key)] = (dtype, shape)
    assert set(body) == set(want)
    assert set(body["values"]) == set(want["values"]), "obs values keys differ from the doc"
    assert set(body["ints"]) == set(want["ints"]), "obs ints keys differ from the doc"
    for key, (dtype, shape) in want["values"].items():
        arr = body["values"][key]
        assert arr.dtype == np.dtype(dtype), (key, arr.dtype, dtype)
        assert arr.shape == shape_of(shape, {"K": k, "C": c}), (key, arr.shape, shape)
    for key, (dtype, shape) in want["ints"].items():
        assert dtype == "int" and shape == ""
        assert type(body["ints"][key]) is int
    assert 0 <= body["ints"]["instruction_id"] < math.factorial(c)

    # and it is a valid obs body, unchanged by the wire; 3 maps deep as section 1 says
    env = wire.decode(wire.encode("obs", body, seq=0, src="sim", stamps={"capture": 1}))
    for key, arr in body["values"].items():
        got = env.body["values"][key]
        assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr)
    assert env.body["ints"] == body["ints"]
    assert depth({"stamps": env.stamps, "body": env.body}) == 3


def test_obs_schema_allows_any_keys():
    """'The schema fixes no key': any str keys, the empty one included, any dtype/shape."""
    body = {
        "values": {"": np.zeros((0, 2), np.uint16), "a b/ü": np.ones((1,) * 8, np.bool_)},
        "ints": {"": -(2**63), "x": 2**63 - 1},
    }
    env = wire.decode(wire.encode("obs", body, seq=0, src="r"))
    assert list(env.body["values"]) == ["", "a b/ü"] and env.body["ints"] == body["ints"]


# --- section 7: error classes --------------------------------------------------------------

# the table's first column -> the MessagePack encodings of that value (all are tried)
VALUES = {
    "`nil` (`c0`)": [b"\xc0"],
    "`false` / `true` (`c2` / `c3`)": [b"\xc2", b"\xc3"],
    "timestamp, ext -1, well-formed (payload 4, 8 or 12 bytes, nanoseconds <= 999 999 999)": [
        b"\xd6\xff\x00\x00\x00\x01",  # timestamp 32
        b"\xd7\xff" + ((999_999_999 << 34) | 5).to_bytes(8, "big"),  # timestamp 64
        b"\xc7\x0c\xff" + (999_999_999).to_bytes(4, "big") + (2**63).to_bytes(8, "big"),
    ],
    "timestamp, ext -1, any other payload": [
        b"\xc7\x03\xffabc",
        b"\xd7\xff" + b"\xff" * 8,
        b"\xc7\x0c\xff" + (10**9).to_bytes(4, "big") + bytes(8),
    ],
    "empty `bin` (`c4 00`)": [b"\xc4\x00"],
    "non-empty `bin`": [b"\xc4\x01x"],
    "empty `array` (`90`)": [b"\x90", b"\xdc\x00\x00"],
    "non-empty `array`": [b"\x91\x01"],
    "ext type 0 or 3..127 or -2..-128": [
        b"\xd4\x00\x00",
        b"\xd4\x03\x00",
        b"\xd4\x7f\x00",
        b"\xd4\xfe\x00",
        b"\xd4\x80\x00",
    ],
}
GAUGE_KEY, GAUGE_VALUE = b"\xa2gk", msgpack.packb(1.5)
TEMPLATE = msgpack.packb(
    {
        "version": 2,
        "topic": "health",
        "seq": 0,
        "src": "a",
        "stamps": {},
        "body": {"node": "n", "state": "ok", "counters": {}, "gauges": {"gk": 1.5}},
    }
)
VERSION = b"\xa7version\x02"


def _place(column: str, value: bytes) -> bytes:
    def swap(old: bytes, new: bytes) -> bytes:
        assert TEMPLATE.count(old) == 1
        return TEMPLATE.replace(old, new)

    if column == "as a body field's value":
        return swap(GAUGE_VALUE, value)
    if column == "as `version`":
        return swap(VERSION, VERSION[:-1] + value)
    if column == "as the whole message":
        return value
    if column == "as a map key":
        return swap(GAUGE_KEY, value)
    raise AssertionError(f"unknown column {column!r} in the error-classes table")


def _error_of(data: bytes) -> type:
    try:
        wire.decode(data)
    except WireError as e:
        return type(e)
    raise AssertionError(f"{data.hex()} decoded")


def test_error_class_table_matches_the_decoder():
    assert wire.decode(TEMPLATE).body["gauges"] == {"gk": 1.5}  # the template itself is valid
    m = re.search(r"<!-- error-classes -->\s*\n(\|.*\|)\n", doc())
    columns = [c.strip() for c in m.group(1).strip("|").split("|")][1:]
    rows = marked_table("error-classes")
    assert {r[0] for r in rows} == set(VALUES), "the error-classes rows changed: update VALUES"
    for row in rows:
        for column, cell in zip(columns, row[1:], strict=True):
            want = ERRORS[unquote(cell)]
            for value in VALUES[row[0]]:
                got = _error_of(_place(column, value))
                assert got is want, (
                    f"{row[0]} {column} ({value.hex()}): {got.__name__}, doc says {want.__name__}"
                )


def test_forbidden_values_where_an_array_is_expected_are_array_errors():
    for value in (None, True, msgpack.Timestamp(1, 0), b"", ()):
        obs = msgpack.packb(
            {
                "version": 2,
                "topic": "obs",
                "seq": 0,
                "src": "a",
                "stamps": {},
                "body": {"values": {"a": value}, "ints": {}},
            },
            use_bin_type=True,
        )
        assert _error_of(obs) is ArrayError, value


def test_parse_time_checks_come_before_the_version():
    """Section 3/9: ext codes, array headers and limits fail before `version` is read;
    finiteness and everything else after it."""
    v1 = b"\xa7version\x01"
    bad_ext = msgpack.packb({"version": 1, "x": msgpack.ExtType(5, b"")})
    bad_bool = msgpack.packb(
        {
            "version": 1,
            "x": msgpack.ExtType(1, bytes([0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2])),
        }
    )
    nan = msgpack.packb(
        {
            "version": 1,
            "x": msgpack.ExtType(
                1,
                bytes([10, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0])
                + np.float32([np.nan]).tobytes(),
            ),
        }
    )
    assert _error_of(bad_ext) is MalformedError
    assert _error_of(bad_bool) is ArrayError
    assert _error_of(TEMPLATE.replace(VERSION, v1) + b"\xc0") is MalformedError  # trailing
    assert _error_of(b"\x82\xa1a\x01\xa1a\x02") is MalformedError  # repeated key, no version
    assert _error_of(nan) is VersionError
    assert (
        _error_of(TEMPLATE.replace(VERSION, v1).replace(b"\xa6stamps", b"\xa6stampz"))
        is VersionError
    )


# --- sections 1 and 6: nesting depth -------------------------------------------------------


def test_nesting_limit():
    text = doc()
    limit = int(re.search(r"\| nesting depth \| (\d+) nested maps/arrays", text).group(1))
    valid = int(re.search(r"a valid message nests at most \*\*(\d+)\*\* maps deep", text).group(1))
    assert f"stops at **{limit}** nested containers" in text

    def health(d: int, inner: bytes = b"\x80") -> bytes:
        """A health message d maps deep: envelope, body, gauges, then a map in gauges."""
        nested = inner
        for _ in range(d - 4):
            nested = b"\x81\xa1k" + nested
        return TEMPLATE.replace(GAUGE_VALUE, nested)

    assert _error_of(health(valid + 1)) is SchemaError  # deeper than any valid message
    frame = {"image": np.zeros((2, 2, 3), np.uint8), "capture_ns": 1}
    obs = wire.decode(
        wire.encode(
            "obs",
            {"values": {}, "ints": {}, "frames": {"cam": frame}},
            seq=0,
            src="n",
            stamps={"capture": 1},
        )
    )
    assert depth({"stamps": obs.stamps, "body": obs.body}) == valid  # the deepest body
    if msgpack.unpackb.__module__ != "msgpack._cmsgpack":
        pytest.skip("the 1024 limit is msgpack's C parser's; this msgpack is the pure-Python one")
    assert _error_of(health(limit)) is SchemaError  # parsed: the schema rejects it
    assert _error_of(health(limit, b"\x90")) is SchemaError  # an empty array counts as 1 too
    assert _error_of(health(limit + 1)) is MalformedError  # the parser stops
    assert _error_of(health(limit + 1, b"\x90")) is MalformedError
    assert _error_of(health(limit + 1).replace(VERSION, b"\xa7version\x01")) is MalformedError


def test_every_valid_shared_vector_nests_within_the_depth_sections_1_and_6_state():
    """A client that recurses only as deep as the document says loses no valid message."""
    import json

    text = doc()
    said = {
        int(re.search(r"a valid message nests at most \*\*(\d+)\*\* maps deep", text).group(1)),
        int(re.search(r"any limit of (\d+) or more loses no valid message", text).group(1)),
        int(re.search(r"a valid message needs (\d+)", text).group(1)),
    }
    vectors = Path(__file__).resolve().parent / "vectors"
    deepest = 0
    for v in json.loads((vectors / "manifest.json").read_text())["decode"]:
        if v["verdict"] == "ok":
            env = wire.decode_frames(
                [(vectors / f).read_bytes() for f in v["frames"]], topics=v.get("topics")
            )
            deepest = max(deepest, depth({"stamps": env.stamps, "body": env.body}))
    assert said == {deepest}, (said, deepest)


# --- section 2: addressed messages ---------------------------------------------------------


def test_the_addressing_table_of_section_2_is_what_the_framing_vectors_say():
    """Each row of section 2's table is a framing vector of tests/vectors (which
    tests/test_vectors.py runs through a real Subscriber) with the same verdict."""
    import json

    vectors = Path(__file__).resolve().parent / "vectors"
    cases = {}
    for v in json.loads((vectors / "manifest.json").read_text())["framing"]:
        frame0, *frames = [(vectors / f).read_bytes() for f in v["frames"]]
        body = wire.decode_frames(frames).body
        to = v.get("to") or {}
        subscribed = [f"{t}\\0{to[t]}\\0" if t in to else t for t in v["topics"]]
        key = (
            frame0.decode().replace("\0", "\\0"),
            body.get("dest", "none"),
            subscribed[0] if len(subscribed) == 1 else None,
        )
        cases[key] = {"ok": "taken"}.get(v["verdict"], v["verdict"])
    rows = marked_table("wire-framing-table")
    assert len(rows) >= 8
    for frame0, dest, subscribed, verdict in rows:
        key = (unquote(frame0), unquote(dest), unquote(subscribed))
        assert cases.get(key) == verdict, (key, cases.get(key), sorted(cases))
    assert "like a plain one" not in section(2)


# --- section 5: topics ---------------------------------------------------------------------


def _topics_from_doc() -> tuple[list[str], list[str]]:
    m = re.search(
        r"The part after the first `/` may be[^:]*: (.*?) are valid\s+`obs`\s+topics;\s+"
        r"(.*?) are\s+unknown\s+kinds",
        doc(),
        re.S,
    )
    assert m, "section 5's sentence on valid topics changed"
    return re.findall(r"`([^`]*)`", m.group(1)), re.findall(r"`([^`]*)`", m.group(2))


def test_topic_validity():
    valid, unknown = _topics_from_doc()
    assert "obs/" in valid and "obsx" in unknown
    body = {"values": {}, "ints": {}}
    for topic in valid:
        env = wire.decode(wire.encode(topic, body, seq=3, src="r"))
        assert env.topic == topic
        with pytest.raises(TopicError):  # a distinct topic: not `obs`
            wire.decode(wire.encode(topic, body, seq=3, src="r"), topics=["obs"])
    for topic in unknown:
        with pytest.raises(TopicError):
            wire.encode(topic, body, seq=0, src="r")
        raw = msgpack.packb(
            {"version": 2, "topic": topic, "seq": 0, "src": "r", "stamps": {}, "body": body}
        )
        assert _error_of(raw) is TopicError
    with pytest.raises(SchemaError):  # the name rule still holds for the whole topic
        wire.encode("obs/a b", body, seq=0, src="r")


# --- section 3: seq per socket, per-hop stamps (a real bus over ipc) -----------------------


def test_seq_counts_per_socket_across_topics_and_stamps_per_hop(tmp_path):
    from rtinfer.transport.bus import Publisher, Subscriber

    text = doc()
    assert "**`seq`** counts messages per publishing socket" in text
    chunk_order = re.search(r"a chunk's envelope stamps therefore read\s+`([^`]*)`", text).group(1)
    obs_body = {"values": {"gantry": np.zeros(8, np.float32)}, "ints": {}}
    health = {"node": "controller", "state": "ok", "counters": {}, "gauges": {}}
    ep = f"ipc://{tmp_path}/bus"
    with (
        Publisher(ep, "sim") as pub,
        Subscriber(ep, ["obs", "obs/", "health", "heartbeat", "action_chunk"]) as every,
        Subscriber(ep, ["obs"]) as only_obs,
    ):
        sent = 0  # slow joiner: publish until both have one; each try takes a seq
        got_all = got_obs = None
        while got_all is None or got_obs is None:
            assert sent < 2000, "the subscribers never connected"
            assert pub.publish("obs", obs_body)
            sent += 1
            got_all = got_all or every.recv(timeout_ms=5)
            got_obs = got_obs or only_obs.recv(timeout_ms=5)
        assert got_all.seq < sent and got_obs.seq < sent  # numbered from 0, one per message
        while every.recv(timeout_ms=50) or only_obs.recv(timeout_ms=50):
            pass

        plan = ["obs", "health", "obs/", "obs", "heartbeat", "obs"]
        for topic in plan:
            body = {"health": health, "heartbeat": {"node": "controller", "sent_ns": 1}}.get(
                topic, obs_body
            )
            assert pub.publish(topic, body, {"capture": 10})
        with pytest.raises(WireError):  # fails to encode: takes no number
            pub.publish("obs", {"values": {}})
        assert pub.publish("obs", obs_body, {"capture": 20, "recv": 5, "publish": 7})
        plan.append("obs")

        envs = [every.recv(timeout_ms=2000) for _ in plan]
        assert [e.topic for e in envs] == plan
        assert [e.seq for e in envs] == list(range(sent, sent + len(plan)))  # one counter
        assert {e.src for e in envs} == {"sim"}
        obs_only = [only_obs.recv(timeout_ms=2000) for _ in range(plan.count("obs"))]
        assert [e.seq for e in obs_only] == [sent + i for i, t in enumerate(plan) if t == "obs"]
        assert only_obs.recv(timeout_ms=50) is None  # `obs/` is not `obs`

        # per-hop stamps: publish appended (a given one kept), recv set in place
        first, last = envs[0], envs[-1]
        assert list(first.stamps) == ["capture", "publish", "recv"]
        assert list(last.stamps) == ["capture", "recv", "publish"] and last.stamps["publish"] == 7
        assert last.stamps["recv"] != 5

        # a chunk answering `first` carries capture only, then the policy's and the hops'
        st = carried_stamps(first.stamps, first.stamps["recv"])
        st["first_token"] = wire.now_ns()
        assert pub.publish(
            "action_chunk",
            waypoint_body(
                first.seq,
                0,
                1,
                np.zeros(2, np.float32),
                spec="h",
                period_ns=1,
                start_ns=1,
                dest=first.src,
            ),
            st,
        )
        chunk = every.recv(timeout_ms=2000)
        assert chunk.topic == "action_chunk" and chunk.seq == sent + len(plan)
        assert ", ".join(chunk.stamps) == chunk_order
        assert chunk.stamps["obs_recv"] == first.stamps["recv"]
        assert chunk.stamps["capture"] == first.stamps["capture"]

    with Publisher(ep, "sim") as again, Subscriber(ep, ["obs"]) as sub:  # a new socket: from 0
        n, got = 0, None
        while got is None:
            assert n < 2000
            again.publish("obs", obs_body)
            n += 1
            got = sub.recv(timeout_ms=5)
        assert got.seq < n


# --- sections 1, 4 and 9: rules written down while building the C++ client --------------------
def _obs_with(value: bytes) -> bytes:
    """An obs message whose `values` map holds one entry, `a`, with these raw bytes."""
    head = msgpack.packb({"version": 2, "topic": "obs", "seq": 0, "src": "s", "stamps": {}})
    return (
        b"\x86"
        + head[1:]
        + msgpack.packb("body")
        + b"\x82"
        + msgpack.packb("values")
        + b"\x81\xa1a"
        + value
        + msgpack.packb("ints")
        + b"\x80"
    )


def _array(code: int, dims, data: bytes = b"") -> bytes:
    import struct

    payload = bytes([code, len(dims)]) + bytes(6) + b"".join(struct.pack("<Q", d) for d in dims)
    return b"\xc7" + bytes([len(payload) + len(data)]) + b"\x01" + payload + data


def _doc_empty_array_rule(code: int, dims) -> bool:
    """Section 4's rule for an empty array, as the page words it: True if it is rejected."""
    itemsize = (1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8)[code]
    nonzero = math.prod(d for d in dims if d)
    return len(dims) >= 2 and (max(dims) > 2**63 - 1 or itemsize * nonzero > 2**63 - 1)


@pytest.mark.parametrize(
    "code,dims",
    [
        (5, (2**63 - 1, 0)),
        (5, (2**63, 0)),
        (5, (2**31, 2**31, 0)),
        (5, (2**62 - 1, 2, 0)),
        (5, (2**62, 2, 0)),
        (11, (2**60 - 1, 0)),
        (11, (0, 2**60)),
        (0, (0,)),
        (0, (0, 5)),
    ],
)
def test_empty_array_size_rule(code, dims):
    text = " ".join(section(4).split())
    assert "an empty array (a dim of 0) of 2 or more dims is rejected" in text
    data = _obs_with(_array(code, dims))
    if _doc_empty_array_rule(code, dims):
        with pytest.raises(wire.MalformedError):
            wire.decode(data)
    else:
        wire.decode(data)


def test_a_map_keys_type_is_checked_after_its_value():
    assert "once its **value** has been" in section(9)
    bad_array = b"\xd4\x01\x00"  # ext 1 with a 1-byte payload: a short array header
    with pytest.raises(wire.ArrayError):
        wire.decode(_obs_with(bad_array).replace(b"\x81\xa1a", b"\x81\xc0"))
    with pytest.raises(wire.MalformedError):
        wire.decode(_obs_with(b"\x01").replace(b"\x81\xa1a", b"\x81\xc0"))


@pytest.mark.parametrize("text", [b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"])
def test_strict_utf8(text):
    assert "no surrogates U+D800..U+DFFF" in section(1)
    msg = wire.encode("command", {"cmd": "stop", "reason": "ab"}, seq=0, src="s")
    with pytest.raises(wire.MalformedError):
        wire.decode(msg.replace(msgpack.packb("ab"), bytes([0xA0 | len(text)]) + text))


def test_the_page_points_to_the_content_hash_and_the_cpp_client():
    spec_row = next(line for line in section(5).splitlines() if line.startswith("| `spec` |"))
    assert "docs/policies.md section 2" in spec_row and "content hash" in spec_row
    assert "clients/cpp/README.md" in section(10)
    assert (DOC.parent.parent / "clients/cpp/README.md").exists()
    assert "tests/vectors/" in DOC.read_text()
