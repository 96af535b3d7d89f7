"""The fixed layout of an `action_chunk` message, as the reference encoder writes it: the packed
keys and headers the fast path (rtinfer.transport.chunk_codec) and its per-length templates
(rtinfer.transport.chunk_templates) compare against, and the small packers both use.
Immutable values only; thread-safe.
"""

import struct

import msgpack
import numpy as np

from rtinfer.transport.arrays import DTYPES
from rtinfer.transport.schema import SCHEMA_VERSION, SMALL_ARRAY, all_finite, f32_finite

F32 = DTYPES[10]
HEAD1 = struct.Struct("<BBHIQ")  # an ext payload's header for ndim 1 (docs/wire.md section 4)

KEYS_TOKENS = (
    "cycle",
    "index",
    "count",
    "dest",
    "values",
    "spec",
    "period_ns",
    "start_ns",
    "tokens",
)
KEYS_VALUES = KEYS_TOKENS[:-1]
# a node's asks (docs/wire.md section 5, "Overload"): optional ints written last, in this order
ASK_KEYS = ("executes", "obs_period_ns")
ASK_TAILS = ((), ("executes",), ("obs_period_ns",), ASK_KEYS)

# The fixed parts, as msgpack writes them: fixstr keys, fixmap headers, version 2.
K = {k: msgpack.packb(k) for k in ("seq", "src", "stamps", "body", *KEYS_TOKENS, *ASK_KEYS)}
PREFIX = b"\x86" + msgpack.packb("version") + msgpack.packb(SCHEMA_VERSION) + msgpack.packb("topic")
FIXMAP = [bytes([0x80 | n]) for n in range(16)]  # fixmap headers, 0..15 entries


def body_head(fields: int) -> bytes:
    """The body's key, its fixmap header of `fields` entries, the first key (`cycle`)."""
    return K["body"] + FIXMAP[fields] + K["cycle"]


def ext_array(code: int, count: int, raw: bytes) -> bytes:
    """An ext 1 value (msgpack ext8/ext16/ext32 header, then the array payload) of a 1-D
    array of `count` elements whose data is `raw`."""
    n = 16 + len(raw)  # >= 17: never one of the fixext sizes
    head = (
        b"\xc7" + n.to_bytes(1, "big")
        if n <= 0xFF
        else b"\xc8" + n.to_bytes(2, "big")
        if n <= 0xFFFF
        else b"\xc9" + n.to_bytes(4, "big")
    )
    return head + b"\x01" + HEAD1.pack(code, 1, 0, 0, count) + raw


def finite(raw: bytes, count: int, values: np.ndarray) -> bool:
    """The float32 `values` (their bytes `raw`) hold no NaN or inf."""
    return f32_finite(raw, count) if count <= SMALL_ARRAY else all_finite(values)
