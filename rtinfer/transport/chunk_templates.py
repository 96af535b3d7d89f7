"""Templates of the action_chunk fast path (rtinfer.transport.chunk_codec): a message of a
length read before, laid out as that one was, read in one struct.unpack.

A template maps a message length to the layout of the last message of that length the
codec's parser read, as a struct that splits it into its constant runs (keys, names, strs,
array headers, int markers) and its values (ints, array data), alternately. A message of
that length whose constant runs are the template's is that layout with other values: every
byte is either compared or read as a value behind the marker compared before it (a positive
fixint is its own marker: read signed, any other marker byte reads negative). Bounded; a
layout replaces the one before it at the same length. Thread-safe as chunk_codec is: a
template is only replaced whole.
"""

import struct

import msgpack
import numpy as np

from rtinfer.transport.arrays import DTYPES
from rtinfer.transport.chunk_layout import (
    ASK_KEYS,
    F32,
    FIXMAP,
    PREFIX,
    K,
    body_head,
    ext_array,
    finite,
)
from rtinfer.transport.schema import I64_MAX, U64_MAX

TEMPLATE_BYTES = 4096  # longer messages get no template (a template holds ~their size)
TEMPLATES_MAX = 256
templates: dict[int, tuple] = {}
_INT_FORMS = (
    (0xFF, b"\xcc", "B"),
    (0xFFFF, b"\xcd", "H"),
    (0xFFFFFFFF, b"\xce", "I"),
    (U64_MAX, b"\xcf", "Q"),
)


def learn(data: bytes, got: tuple) -> None:
    """Remember the layout of `data`, which the codec's parser read as `got`."""
    if len(templates) >= TEMPLATES_MAX and len(data) not in templates:
        return
    topic, seq, src, stamps, body = got
    values, tokens = body["values"], body.get("tokens")
    asks = tuple(k for k in ASK_KEYS if k in body)
    items = [
        PREFIX,
        msgpack.packb(topic),
        K["seq"],
        seq,
        K["src"],
        msgpack.packb(src),
        K["stamps"],
        FIXMAP[len(stamps)],
    ]
    for k, t in stamps.items():
        items += (msgpack.packb(k), t)
    items += (
        body_head(len(body)),
        body["cycle"],
        K["index"],
        body["index"],
        K["count"],
        body["count"],
        K["dest"],
        msgpack.packb(body["dest"]),
        K["values"],
        _ext_head(10, values),
        (values.nbytes,),
        K["spec"],
        msgpack.packb(body["spec"]),
        K["period_ns"],
        body["period_ns"],
        K["start_ns"],
        body["start_ns"],
    )
    if tokens is not None:
        items += (K["tokens"], _ext_head(DTYPES.index(tokens.dtype), tokens), (tokens.nbytes,))
    for k in asks:
        items += (K[k], body[k])
    consts, codes, run = [], [">"], b""  # ints by value, array data as (byte count,)
    for item in items:
        if type(item) is bytes:
            run += item
            continue
        if type(item) is tuple:
            code = f"{item[0]}s"  # array data: (its byte count,)
        elif item < 0x80:
            code = "b"
        else:
            marker, code = next((m, c) for top, m, c in _INT_FORMS if item <= top)
            run += marker
        consts.append(run)
        codes += (f"{len(run)}s", code)
        run = b""
    layout = struct.Struct("".join(codes))
    if layout.size != len(data) or layout.unpack(data)[0::2] != tuple(consts):
        return  # not the shortest forms: the parser reads it, a template would not match
    templates[len(data)] = (
        layout,
        tuple(consts),
        topic,
        src,
        tuple(stamps),
        body["dest"],
        body["spec"],
        None if tokens is None else tokens.dtype,
        asks,
    )


def _ext_head(code: int, arr: np.ndarray) -> bytes:
    """The ext 1 value of 1-D `arr` up to its data: msgpack's ext header, the array header."""
    ext = ext_array(code, arr.size, bytes(arr.nbytes))
    return ext[: len(ext) - arr.nbytes]


def by_template(data: bytes, topics, template: tuple):
    """decode_chunk's result if `data` has the template's layout, else None."""
    layout, consts, topic, src, keys, dest, spec, tokens_dtype, asks = template
    if topics is not None and topic not in topics:
        return None
    parts = layout.unpack(data)
    if parts[0::2] != consts:
        return None
    n = len(keys)
    vals = parts[1::2]
    seq, stamp_values = vals[0], vals[1 : 1 + n]
    cycle, index, count, raw, period, start = vals[1 + n : 7 + n]
    ask_values = vals[len(vals) - len(asks) :]
    if (
        (seq | cycle | index | start) < 0
        or index >= count
        or not 0 < period <= I64_MAX
        or start > I64_MAX
        or n
        and (min(stamp_values) < 0 or max(stamp_values) > I64_MAX)
    ):
        return None  # a marker where the template has a fixint, or a value out of range
    for k, v in zip(asks, ask_values):  # executes within its chunk, a period in range
        if not 0 < v <= (count if k == "executes" else I64_MAX):
            return None
    values = np.frombuffer(raw, F32)
    if not finite(raw, values.size, values):
        return None
    body = {
        "cycle": cycle,
        "index": index,
        "count": count,
        "dest": dest,
        "values": values,
        "spec": spec,
        "period_ns": period,
        "start_ns": start,
    }
    if tokens_dtype is not None:
        body["tokens"] = np.frombuffer(vals[7 + n], tokens_dtype)
    body.update(zip(asks, ask_values))
    return topic, seq, src, dict(zip(keys, stamp_values)), body
