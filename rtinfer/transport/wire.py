"""The rtinfer wire format: msgpack envelopes with typed bodies and ndarray ext types.

    encode(topic, body, seq=, src=) -> bytes          decode(bytes) -> Envelope
    encode_frames(...) -> [envelope, *array frames]   decode_frames(frames) -> Envelope

msgpack only, never pickle. Every decoder failure, whatever the bytes, is a `WireError`
(subclasses say why) whose message says what was wrong; callers count and drop. Decoded
arrays are read-only views of the received buffers. All functions are thread-safe and
never block. The normative spec, with byte layouts and a worked example, is docs/wire.md.
"""

import math
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import msgpack

from rtinfer.transport import schema
from rtinfer.transport.arrays import OobHook, OobPacker, ext_hook
from rtinfer.transport.chunk_codec import decode_chunk, encode_chunk
from rtinfer.transport.schema import (  # noqa: F401  (re-exported: the wire's public error types)
    DEFAULT_MAX_BYTES,
    MAX_STR_BYTES,
    SCHEMA_VERSION,
    U64_MAX,
    ArrayError,
    MalformedError,
    OversizeError,
    SchemaError,
    TopicError,
    VersionError,
    WireError,
    check_name,
)

ENVELOPE_KEYS = ("version", "topic", "seq", "src", "stamps", "body")
_ENVELOPE_KEYSET = frozenset(ENVELOPE_KEYS)
MAX_MAP_LEN = 4096  # most entries in any one map
COPY_BYTES = 65536  # decode() reads a single-frame message up to this size from a bytes copy
_ERRORS = (
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
    MemoryError,
    KeyError,
    IndexError,
    msgpack.UnpackException,
)


@dataclass(slots=True)
class Envelope:
    """One decoded message. `stamps` keeps wire order; arrays in `body` are read-only."""

    version: int
    topic: str
    seq: int
    src: str
    stamps: dict[str, int]
    body: dict


# The one clock for stamps: CLOCK_MONOTONIC in nanoseconds. An alias, not a wrapper: it is
# read several times per message and a Python-level wrapper call costs more than the read.
now_ns = time.monotonic_ns


def _envelope(topic, body, seq, src, stamps) -> dict:
    if stamps is None:
        stamps = {}
    _check_fields(topic, seq, src, stamps, body, None)  # we build the map: only fields to check
    return {
        "version": SCHEMA_VERSION,
        "topic": topic,
        "seq": seq,
        "src": src,
        "stamps": stamps,
        "body": body,
    }


class _Packer(threading.local):
    """A msgpack Packer and its array hook per thread: building them costs ~1 us a message."""

    def __init__(self):
        self.hook = OobPacker(0)
        self.packer = msgpack.Packer(default=self.hook, use_bin_type=True)
        self.busy = False  # True while packing: a signal handler that encodes gets its own


_packer = _Packer()


def _pack(env: dict, oob_bytes) -> tuple[bytes, list[memoryview]]:
    """(envelope bytes, out-of-band frames); arrays of >= oob_bytes bytes go out of band."""
    p = _packer
    if p.busy:  # re-entered in this thread mid-pack: the shared packer is in use
        hook = OobPacker(oob_bytes)
        packer = msgpack.Packer(default=hook, use_bin_type=True)
    else:
        hook, packer = p.hook, p.packer
        p.busy = True
    hook.oob_bytes = oob_bytes
    frames: list[memoryview] = []
    hook.frames = frames
    try:
        return packer.pack(env), frames
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError) as e:
        raise SchemaError(
            f"cannot be packed ({e}): bodies hold only maps, strings, numbers and ndarrays", "body"
        ) from None
    finally:
        hook.frames = []  # don't keep the caller's arrays alive
        if packer is p.packer:
            p.busy = False


def _why(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e)[:80]}" if str(e) else type(e).__name__


def _check_size(nbytes: int, max_bytes: int, what: str) -> None:
    if nbytes > max_bytes:
        raise OversizeError(
            f"{what} is {nbytes} bytes, over the {max_bytes}-byte limit: send "
            "less per message or raise max_bytes on both ends"
        )


def encode(
    topic: str,
    body: dict,
    *,
    seq: int,
    src: str,
    stamps: dict | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> bytes:
    """One self-contained message (arrays inline). Bad body or too big -> WireError."""
    data = encode_chunk(
        topic, body, seq, src, {} if stamps is None else stamps, max_bytes, math.inf
    )  # the common action_chunk: same bytes, fewer steps
    if data is not None:
        return data
    data, _ = _pack(_envelope(topic, body, seq, src, stamps), math.inf)  # all inline
    if len(data) > max_bytes:
        _check_size(len(data), max_bytes, "message")
    return data


def encode_frames(
    topic: str,
    body: dict,
    *,
    seq: int,
    src: str,
    stamps: dict | None = None,
    oob_bytes: int = 65536,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[bytes | memoryview]:
    """[envelope, *array frames]: arrays of >= oob_bytes bytes travel as zero-copy frames.

    The memoryviews alias the caller's arrays: do not modify them until the send is done.
    On ZeroMQ the bus sends [topic.encode(), *encode_frames(...)].
    """
    data = encode_chunk(
        topic, body, seq, src, {} if stamps is None else stamps, max_bytes, oob_bytes
    )  # the common action_chunk: same bytes, fewer steps
    if data is not None:
        return [data]
    data, oob = _pack(_envelope(topic, body, seq, src, stamps), oob_bytes)
    if not oob:
        if len(data) > max_bytes:
            _check_size(len(data), max_bytes, "message (all frames)")
        return [data]
    _check_size(len(data) + sum(f.nbytes for f in oob), max_bytes, "message (all frames)")
    return [data, *oob]


def _map(pairs: tuple) -> dict:
    """Maps with a repeated key are refused: decoders that keep the first and the last
    occurrence would otherwise see different messages (a classic parser differential)."""
    d = dict(pairs)
    if len(d) != len(pairs):
        raise MalformedError("a map repeats a key: every key may appear only once")
    return d


def _unpack(buf, hook, max_bytes: int):
    return msgpack.unpackb(
        buf,
        raw=False,
        strict_map_key=True,
        use_list=False,
        object_pairs_hook=_map,
        ext_hook=hook,
        max_str_len=MAX_STR_BYTES,
        max_bin_len=0,
        max_array_len=0,
        max_map_len=MAX_MAP_LEN,
        max_ext_len=max_bytes,
    )


def _validate(env, topics: Collection[str] | None) -> None:
    if not isinstance(env, dict):
        raise MalformedError(
            f"message is a msgpack {type(env).__name__}: it must be a map "
            f"with keys {list(ENVELOPE_KEYS)}"
        )
    version = env.get("version")
    if version != SCHEMA_VERSION or type(version) is not int:
        raise VersionError(
            f"schema version {version!r:.40} is not supported (this receiver "
            f"speaks {SCHEMA_VERSION}): run the same rtinfer release on both ends"
        )
    if env.keys() != _ENVELOPE_KEYSET:
        extra = sorted(map(repr, env.keys() - _ENVELOPE_KEYSET))[:8]
        missing = sorted(_ENVELOPE_KEYSET - env.keys())
        raise SchemaError(
            f"envelope keys must be exactly {list(ENVELOPE_KEYS)}: "
            f"missing {missing}, unknown {extra}",
            "envelope",
        )
    _check_fields(env["topic"], env["seq"], env["src"], env["stamps"], env["body"], topics)


def _check_fields(topic, seq, src, stamps, body, topics) -> None:
    """The envelope's fields, then the body against its topic's schema (both directions)."""
    name = "topic"
    try:
        check_name(topic)
        name = "seq"
        if type(seq) is not int or not 0 <= seq <= U64_MAX:  # common case without a call
            schema.u64(seq)
        name = "src"
        check_name(src)
        name = "stamps"
        schema.stamps(stamps)
    except SchemaError as e:
        e.at(name)  # names the field, in place
        raise
    if topics is not None and topic not in topics:
        raise TopicError(f"topic {topic!r} is not one this receiver subscribed to")
    schema.check_body(schema.body_spec(topic), body)


def decode(
    data, *, max_bytes: int = DEFAULT_MAX_BYTES, topics: Collection[str] | None = None
) -> Envelope:
    """Decode one single-frame message (bytes, memoryview or any byte buffer).

    Checks the size before unpacking, then version, envelope, topic (against `topics`
    when given) and the body schema. Raises only WireError.
    """
    try:
        if type(data) is not bytes:  # e.g. a zmq frame's buffer
            data = memoryview(data)
            # A small message is copied once here: both paths then read bytes, which costs
            # less than the view (about 5 us a message with the caches cold, as in a paced loop).
            data = bytes(data) if data.nbytes <= COPY_BYTES else data.cast("B")
        _check_size(len(data), max_bytes, "message")
        fast = decode_chunk(data, topics)  # the common action_chunk, or None: the generic path
        if fast is not None:
            return Envelope(SCHEMA_VERSION, *fast)
        env = _unpack(data, ext_hook, max_bytes)
        _validate(env, topics)
    except WireError:
        raise
    except _ERRORS as e:
        raise MalformedError(
            f"not a valid rtinfer msgpack message ({_why(e)}): check the sender speaks docs/wire.md"
        ) from None
    return Envelope(
        env["version"], env["topic"], env["seq"], env["src"], env["stamps"], env["body"]
    )


def decode_frames(
    frames: Sequence, *, max_bytes: int = DEFAULT_MAX_BYTES, topics: Collection[str] | None = None
) -> Envelope:
    """Decode [envelope, *array frames] (the multipart message minus its topic frame).

    Out-of-band arrays are read-only views of their frames: no copy. `max_bytes` bounds
    the total of all frames. Raises only WireError.
    """
    try:
        if len(frames) == 1:
            return decode(frames[0], max_bytes=max_bytes, topics=topics)
        if len(frames) == 0:
            raise MalformedError("no frames: a message has at least the envelope frame")
        views = [memoryview(f).cast("B") for f in frames]
        _check_size(sum(v.nbytes for v in views), max_bytes, "message (all frames)")
        hook = OobHook(views)
        env = _unpack(views[0], hook, max_bytes)
        hook.check_all_used()
        _validate(env, topics)
    except WireError:
        raise
    except _ERRORS as e:
        raise MalformedError(
            f"not a valid rtinfer multipart message ({_why(e)}): "
            "check the sender speaks docs/wire.md"
        ) from None
    return Envelope(
        env["version"], env["topic"], env["seq"], env["src"], env["stamps"], env["body"]
    )
