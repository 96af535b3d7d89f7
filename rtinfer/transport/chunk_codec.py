"""A fixed-layout fast path for `action_chunk` messages: the reference encoder's exact bytes.

    encode_chunk(topic, body, seq, src, stamps, max_bytes, oob_bytes) -> bytes | None
    decode_chunk(data, topics) -> (topic, seq, src, stamps, body) | None

Both cover only the common case: the envelope and body keys in the order `wire` writes them
(a node's asks, `executes` and `obs_period_ns`, included), plain ints, the shortest int and
str forms, a fixmap of stamps, 1-D inline arrays. Anything
else returns None and the caller takes the generic codec, which then accepts it or raises
the right WireError. So this module never raises and never decides a verdict: it accepts a
subset of what the generic codec accepts, and produces (or reads) the same bytes and values
(tests/test_wire_fastpath.py checks both against the generic codec). Thread-safe: the memos
and templates below are bounded and hold immutable values; memos are only added to, and a
template is only replaced whole. The templates live in rtinfer.transport.chunk_templates,
the fixed parts in rtinfer.transport.chunk_layout.
"""

import msgpack
import numpy as np

from rtinfer.transport.arrays import DTYPES, EXT_ARRAY
from rtinfer.transport.chunk_layout import (
    ASK_KEYS,
    ASK_TAILS,
    F32,
    HEAD1,
    KEYS_TOKENS,
    KEYS_VALUES,
    PREFIX,
    K,
    body_head,
    ext_array,
    finite,
)
from rtinfer.transport.chunk_templates import TEMPLATE_BYTES, by_template, learn, templates
from rtinfer.transport.schema import I64_MAX, MAX_NAME_CHARS, MAX_STR_BYTES, U64_MAX, topic_kind

_MEMO_MAX = 4096  # entries per memo: hostile input cannot grow them without bound
_INT_CODE = {dt.num: code for code, dt in enumerate(DTYPES) if dt.kind in "iu"}  # codes 1..8
_templates, _by_template = templates, by_template  # (the names tests look at)
_SEQ, _SRC, _STAMPS = K["seq"], K["src"], K["stamps"]
_BODY, _CYCLE, _FIELDS_MIN = K["body"], K["cycle"], len(KEYS_VALUES)
_INDEX, _COUNT, _DEST, _VALUES = K["index"], K["count"], K["dest"], K["values"]
_SPEC, _PERIOD, _START, _TOKENS = K["spec"], K["period_ns"], K["start_ns"], K["tokens"]

# Encode memos: str -> its msgpack bytes. Names only once check_name-valid; topics also of
# kind action_chunk.
_topic_bytes: dict[str, bytes] = {}
_name_bytes: dict[str, bytes] = {}
_str_bytes: dict[str, bytes] = {}
# Decode memos: msgpack str bytes (header included) -> the str.
_topic_of: dict[bytes, str] = {}
_name_of: dict[bytes, str] = {}
_str_of: dict[bytes, str] = {}
_FIXINT = [bytes([i]) for i in range(128)]  # positive fixint 0..127
_UINT8 = [b"\xcc" + bytes([i]) for i in range(256)]  # uint8, for 128..255
_MEMO_STR_BYTES = 256  # longer strings are packed every time, not kept


def _is_name(s: str) -> bool:
    """schema.check_name's rule, as a predicate."""
    return 0 < len(s) <= MAX_NAME_CHARS and s.isascii() and s.isprintable() and " " not in s


def _remember(memo: dict, key, value):
    if len(memo) < _MEMO_MAX:
        memo[key] = value
    return value


def _name_packed(s, memo: dict, topic: bool):
    """The msgpack bytes of name `s` (a topic: of kind action_chunk), or None."""
    if type(s) is not str or not _is_name(s) or (topic and topic_kind(s) != "action_chunk"):
        return None
    return _remember(memo, s, msgpack.packb(s))


def _str_packed(s):
    """The msgpack bytes of str `s`, or None (not a str, not UTF-8: a lone surrogate, or
    possibly over the string limit: the generic codec refuses it, naming the field)."""
    if type(s) is not str or len(s) * 4 > MAX_STR_BYTES:
        return None
    try:
        packed = msgpack.packb(s)
    except ValueError:
        return None
    return _remember(_str_bytes, s, packed) if len(packed) <= _MEMO_STR_BYTES else packed


def _pack_uint(v: int) -> bytes:
    """msgpack's shortest form of 0 <= v <= U64_MAX (the caller checked the range)."""
    if v < 0x80:
        return _FIXINT[v]
    if v <= 0xFF:
        return _UINT8[v]
    if v <= 0xFFFF:
        return b"\xcd" + v.to_bytes(2, "big")
    if v <= 0xFFFFFFFF:
        return b"\xce" + v.to_bytes(4, "big")
    return b"\xcf" + v.to_bytes(8, "big")


def encode_chunk(topic, body, seq, src, stamps, max_bytes, oob_bytes):
    """The message `wire.encode_frames` would produce as its one frame, or None (generic)."""
    if type(body) is not dict or type(stamps) is not dict or type(seq) is not int:
        return None
    keys = tuple(body)
    tcode = None  # the tokens' dtype code: set for a chunk of tokens
    if keys[:9] == KEYS_TOKENS:
        tokens = body["tokens"]
        if type(tokens) is not np.ndarray or tokens.ndim != 1 or not tokens.dtype.isnative:
            return None
        tcode = _INT_CODE.get(tokens.dtype.num)
        if tcode is None:
            return None
    elif keys[:8] != KEYS_VALUES:
        return None
    asks = keys[9 if tcode is not None else 8 :]
    if asks not in ASK_TAILS:
        return None
    cycle, index, count = body["cycle"], body["index"], body["count"]
    period, start, values = body["period_ns"], body["start_ns"], body["values"]
    if (
        type(cycle) is not int
        or type(index) is not int
        or type(count) is not int
        or type(period) is not int
        or type(start) is not int
        or not (
            0 <= seq <= U64_MAX
            and 0 <= cycle <= U64_MAX
            and 0 <= index < count <= U64_MAX
            and 0 < period <= I64_MAX
            and 0 <= start <= I64_MAX
        )
    ):
        return None
    if (
        type(values) is not np.ndarray
        or values.dtype is not F32
        or values.ndim != 1
        or not values.size
        or values.nbytes >= oob_bytes
    ):
        return None
    raw = values.tobytes()  # C order whatever the strides
    if not finite(raw, values.size, values):
        return None
    if len(stamps) > 15:  # a fixmap holds 0..15 entries
        return None
    dest, spec = body["dest"], body["spec"]
    # `type(x) is str and memo.get(x)`: an unhashable x must not reach a dict lookup
    out = [
        PREFIX,
        (type(topic) is str and _topic_bytes.get(topic)) or _name_packed(topic, _topic_bytes, True),
        _SEQ,
        _pack_uint(seq),
        _SRC,
        (type(src) is str and _name_bytes.get(src)) or _name_packed(src, _name_bytes, False),
        _STAMPS,
        bytes([0x80 | len(stamps)]),
    ]
    for k, t in stamps.items():
        if type(t) is not int or not 0 <= t <= I64_MAX:
            return None
        out.append(_str_bytes.get(k) or _str_packed(k))
        out.append(_pack_uint(t))
    out += (
        body_head(len(keys)),
        _pack_uint(cycle),
        _INDEX,
        _pack_uint(index),
        _COUNT,
        _pack_uint(count),
        _DEST,
        (type(dest) is str and _name_bytes.get(dest)) or _name_packed(dest, _name_bytes, False),
        _VALUES,
        ext_array(10, values.size, raw),
        _SPEC,
        (type(spec) is str and _str_bytes.get(spec)) or _str_packed(spec),
        _PERIOD,
        _pack_uint(period),
        _START,
        _pack_uint(start),
    )
    if tcode is not None:  # a chunk of tokens: they go last
        if tokens.shape != values.shape or tokens.nbytes >= oob_bytes:
            return None
        out += (_TOKENS, ext_array(tcode, tokens.size, tokens.tobytes()))
    for k in asks:  # ints in range (executes within its chunk); else the generic codec judges
        v = body[k]
        if type(v) is not int or not 0 < v <= (count if k == "executes" else I64_MAX):
            return None
        out += (K[k], _pack_uint(v))
    if None in out:  # a name, topic or string the generic codec must judge
        return None
    data = b"".join(out)
    return data if len(data) <= max_bytes else None


class _Miss(Exception):
    """Not the fixed layout (internal: decode_chunk returns None)."""


_UINT_WIDTH = bytes(0xCC) + bytes((1, 2, 4, 8)) + bytes(0x30)  # uint8..uint64 -> bytes after
_array_of: dict[bytes, tuple] = {}  # ext8 header + array header (19 bytes) -> its meaning


def _read_uint(data: bytes, p: int) -> tuple[int, int]:
    """(value, end) of the non-negative int at p: a positive fixint or uint8..uint64."""
    b = data[p]
    if b < 0x80:
        return b, p + 1
    w = _UINT_WIDTH[b]
    if not w:
        raise _Miss
    return int.from_bytes(data[p + 1 : p + 1 + w], "big"), p + 1 + w


def _learn_str(memo: dict, data: bytes, p: int, end: int, rule) -> str:
    """The fixstr at data[p:end], checked (strict UTF-8, then `rule`) and remembered."""
    if data[p] >> 5 != 0b101 or end > len(data):  # fixstr: 0xa0..0xbf
        raise _Miss
    try:
        s = str(data[p + 1 : end], "utf-8")  # strict, as msgpack decodes
    except UnicodeDecodeError:
        raise _Miss from None
    if rule is not None and not rule(s):
        raise _Miss
    return _remember(memo, data[p:end], s)


def _learn_array(data: bytes, p: int) -> tuple:
    """(dtype, count, bytes to skip) of the ext8 array value at data[p:p+19]: ext type 1,
    1-D, non-empty, not bool, its length matching the header."""
    if len(data) < p + 19 or data[p] != 0xC7 or data[p + 2] != EXT_ARRAY:
        raise _Miss
    code, ndim, r1, r2, count = HEAD1.unpack_from(data, p + 3)
    if ndim != 1 or r1 or r2 or not 0 < code < len(DTYPES) or not count:
        raise _Miss
    dt = DTYPES[code]
    if data[p + 1] != 16 + count * dt.itemsize:
        raise _Miss
    return _remember(_array_of, data[p : p + 19], (dt, count, 19 + count * dt.itemsize))


def _topic_rule(s: str) -> bool:
    return _is_name(s) and topic_kind(s) == "action_chunk"


def decode_chunk(data, topics):
    """(topic, seq, src, stamps, body) exactly as the generic decoder gives them, or None.

    `data` is the whole single-frame message, already within max_bytes. Arrays are
    read-only views of `data` or of bytes taken from it. A message laid out as one already
    read (its length's template, below) is read in one struct.unpack; otherwise each str is
    read through a memo of its raw bytes, each array header through one of its 19 header
    bytes, and the layout is learnt.
    """
    if type(data) is not bytes:
        if data[17:29] != b"action_chunk":  # another kind: copy nothing
            return None
        data = bytes(data)
    template = _templates.get(len(data))
    if template is not None:
        got = _by_template(data, topics, template)
        if got is not None:
            return got
    got = _parse(data, topics)
    if got is not None and len(data) <= TEMPLATE_BYTES:
        learn(data, got)
    return got


def _parse(data: bytes, topics):
    """decode_chunk without templates."""
    names, strs, arrays, lit = _name_of, _str_of, _array_of, data.startswith
    try:  # inline reads: this runs once a message, and a call costs more than its work here
        end = 17 + (data[16] & 0x1F)
        topic = _topic_of.get(data[16:end]) or _learn_str(_topic_of, data, 16, end, _topic_rule)
        if not lit(PREFIX) or not lit(_SEQ, end) or topics is not None and topic not in topics:
            return None
        seq, p = _read_uint(data, end + 4)
        end = p + 5 + (data[p + 4] & 0x1F)
        src = names.get(data[p + 4 : end]) or _learn_str(names, data, p + 4, end, _is_name)
        if not lit(_SRC, p) or not lit(_STAMPS, end) or data[end + 7] >> 4 != 0x8:  # a fixmap
            return None
        n, p = data[end + 7] & 0xF, end + 8
        stamps = {}
        for _ in range(n):
            end = p + 1 + (data[p] & 0x1F)
            k = strs.get(data[p:end]) or _learn_str(strs, data, p, end, None)
            stamps[k], p = _read_uint(data, end)
        if len(stamps) != n or n and max(stamps.values()) > I64_MAX:  # repeated key: Malformed
            return None
        fields = data[p + 5] - 0x80  # the body's fixmap: 8 or 9 fields, and the asks
        if not lit(_BODY, p) or not lit(_CYCLE, p + 6) or not 8 <= fields <= 11:
            return None
        cycle, p = _read_uint(data, p + 12)
        index, q = _read_uint(data, p + 6)
        count, r = _read_uint(data, q + 6)
        if not lit(_INDEX, p) or not lit(_COUNT, q):
            return None
        p = r
        end = p + 6 + (data[p + 5] & 0x1F)
        dest = names.get(data[p + 5 : end]) or _learn_str(names, data, p + 5, end, _is_name)
        dt, size, skip = arrays.get(data[end + 7 : end + 26]) or _learn_array(data, end + 7)
        values = np.frombuffer(data, dt, size, end + 26)
        if not lit(_DEST, p) or not lit(_VALUES, end):
            return None
        raw = data[end + 26 : end + 26 + 4 * size]  # float32 once its header is checked below
        p = end + 7 + skip
        end = p + 6 + (data[p + 5] & 0x1F)
        spec = strs.get(data[p + 5 : end]) or _learn_str(strs, data, p + 5, end, None)
        if not lit(_SPEC, p):
            return None
        period, p = _read_uint(data, end + 10)
        start, q = _read_uint(data, p + 9)
        if not lit(_PERIOD, end) or not lit(_START, p):
            return None
        p = q
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
        if lit(_TOKENS, p):
            dt, size, skip = arrays.get(data[p + 7 : p + 26]) or _learn_array(data, p + 7)
            if dt.kind not in "iu" or size != values.size:
                return None
            body["tokens"] = np.frombuffer(data, dt, size, p + 26)
            p += 7 + skip
        for k in ASK_KEYS:  # in this order; anything else is the generic codec's
            if len(body) < fields and lit(K[k], p):
                body[k], p = _read_uint(data, p + len(K[k]))
    except (_Miss, IndexError, ValueError):  # ValueError: frombuffer past the end
        return None
    if (
        p != len(data)
        or len(body) != fields
        or index >= count
        or not 0 < period <= I64_MAX
        or start > I64_MAX
        or values.dtype is not F32
        or not finite(raw, values.size, values)
        or not _asks_in_range(body, count)
    ):
        return None  # trailing bytes, out of range, not finite
    return topic, seq, src, stamps, body


def _asks_in_range(body: dict, count: int) -> bool:
    """A node's asks, when present, in their ranges (executes within its chunk)."""
    e, period = body.get("executes", 1), body.get("obs_period_ns", 1)
    return 0 < e <= count and 0 < period <= I64_MAX
