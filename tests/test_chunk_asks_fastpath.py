"""The action_chunk fast path with a node's asks (`executes`, `obs_period_ns`; docs/wire.md
section 5, "Overload") against the generic codec, as tests/test_wire_fastpath.py checks it
without them: the same bytes out, the same verdict, error class and values in, for valid,
out-of-range and mutated asks; and a typical chunk with asks takes the fast path both ways."""

from hypothesis import given
from hypothesis import strategies as st

from rtinfer.transport import chunk_codec, wire
from tests.test_wire_fastpath import (
    CHUNK_TOPICS,
    SETTINGS,
    assert_decoders_agree,
    assert_encoders_agree,
    generic_only,
    typical,
)
from tests.test_wire_properties import action_chunks, mutate, names, stamps

ASK = st.sampled_from(
    [
        {},
        {"executes": None},
        {"obs_period_ns": None},
        {"executes": None, "obs_period_ns": None},
        {"obs_period_ns": None, "executes": None},
    ]
)  # the last: out of order


@st.composite
def asked_chunks(draw):
    """A valid chunk with asks (executes within its count), or with one out of range."""
    body = draw(action_chunks())
    for k in draw(ASK):
        top = body["count"] if k == "executes" else 2**63 - 1
        body[k] = draw(st.integers(1, top) | st.sampled_from([0, -1, top + 1, 1.0, True]))
    return body


@SETTINGS
@given(CHUNK_TOPICS, asked_chunks(), st.integers(0, 2**64 - 1), names, stamps)
def test_chunks_with_asks_encode_and_decode_as_the_generic_codec(topic, body, seq, src, st_):
    assert_encoders_agree(topic, body, seq, src, st_)
    with generic_only():
        try:
            encoded = wire.encode(topic, body, seq=seq, src=src, stamps=st_)
        except wire.WireError:
            return
    assert_decoders_agree(encoded)
    assert_decoders_agree(encoded)  # again: now by the template its length learnt


@SETTINGS
@given(CHUNK_TOPICS, asked_chunks(), names, stamps, st.data())
def test_mutated_chunks_with_asks_get_the_generic_verdict(topic, body, src, st_, data):
    with generic_only():
        try:
            encoded = wire.encode(topic, body, seq=1, src=src, stamps=st_)
        except wire.WireError:
            return
    assert_decoders_agree(encoded)  # learn the layout, then read its mutants
    assert_decoders_agree(mutate(encoded, data.draw))


def test_a_typical_chunk_with_asks_takes_the_fast_path_both_ways():
    body = {**typical(), "executes": 3, "obs_period_ns": 150_000_000}
    stamps_ = {"capture": 10**13, "publish": 10**13 + 9}
    data = chunk_codec.encode_chunk(
        "action_chunk", body, 3, "inf", stamps_, wire.DEFAULT_MAX_BYTES, 65536
    )
    with generic_only():
        assert data == wire.encode("action_chunk", body, seq=3, src="inf", stamps=stamps_)
    for _ in range(2):  # parsed, then by its template
        got = chunk_codec.decode_chunk(data, ("action_chunk",))
        assert got is not None and (got[4]["executes"], got[4]["obs_period_ns"]) == (3, 150_000_000)
    over = data.replace(b"\xa8executes\x03", b"\xa8executes\x7f")  # past its count: generic
    assert chunk_codec.decode_chunk(over, None) is None
