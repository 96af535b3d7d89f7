"""What a valid rtinfer message is: the error types, the limits and the body schemas.

The same validators run on both sides: `wire.encode` checks the body a caller built and
`wire.decode` checks what msgpack produced, so anything that encodes also decodes.
Validators never mutate or copy; they raise `SchemaError` (a `WireError`) naming the field.
docs/wire.md is the normative description; keep the two in step.
"""

import math

import numpy as np

SCHEMA_VERSION = 2  # 2: action_chunk for both policy kinds (optional tokens, spec, dest, start_ns)
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
MAX_NAME_CHARS = 128  # topic, src and node names
COMMANDS = frozenset({"safe_hold", "clear", "stop"})
SMALL_ARRAY = 64  # elements: up to here a Python-float sum beats np.isfinite (~0.3 vs 1.3 us)
_CACHE_MAX = 4096  # entries in each memo below; bounded so hostile input cannot grow them
_good_names: set[str] = set()  # strings already found to be valid names (str is immutable)
_plan_by_topic: dict = {}  # topic -> its compiled body schema: one dict lookup a message


class WireError(ValueError):
    """The one error type of the wire boundary: a message was malformed or invalid."""


class OversizeError(WireError):
    """The message is larger than the receiver's max_bytes."""


class MalformedError(WireError):
    """The bytes are not a well-formed rtinfer msgpack message (or its frames disagree)."""


class VersionError(WireError):
    """The envelope's schema version is missing or not one this receiver speaks."""


class TopicError(WireError):
    """The topic is unknown or not one the receiver asked for."""


class SchemaError(WireError):
    """A field is missing, unknown, of the wrong type or out of range. `.path` names it."""

    def __init__(self, problem: str, path: str = ""):
        self.problem, self.path = problem, path
        super().__init__(f"{path}: {problem}" if path else problem)

    def at(self, prefix: str) -> "SchemaError":
        """Prepend a path component (error path only, so the hot path builds no strings)."""
        self.path = prefix + self.path
        self.args = (f"{self.path}: {self.problem}",)
        return self


class ArrayError(SchemaError):
    """An ndarray is malformed or not allowed (dtype, ndim, byte length, non-finite)."""


def _tname(v) -> str:
    return type(v).__name__


def check_int(lo: int, hi: int, rule: str):
    """An integer in [lo, hi]. bool is rejected although Python counts it as an int."""

    def check(v):
        if type(v) is not int:
            if not isinstance(v, np.integer):  # numpy scalars only reach here on encode
                raise SchemaError(
                    f"must be an integer {rule}, got {_tname(v)}; "
                    "send a plain int (bool is not an int on the wire)"
                )
            v = int(v)
        if not lo <= v <= hi:
            raise SchemaError(f"{v} is out of range: must be an integer {rule}")

    # lets body plans test plain ints inline (see _plan); a function attribute mypy cannot see
    check.int_range = (lo, hi)  # type: ignore[attr-defined]
    return check


def check_float(v):
    """A finite real number: msgpack float32/float64, or an int (bool rejected)."""
    t = type(v)
    if t is float or isinstance(v, (float, np.floating)):  # np.float64 is a float subclass
        if not math.isfinite(v):
            raise SchemaError(
                f"{v} is not finite: NaN and inf are rejected; "
                "send a finite value or leave the entry out"
            )
    elif not (t is int or isinstance(v, np.integer)) or not I64_MIN <= int(v) <= U64_MAX:
        raise SchemaError(f"must be a finite float, got {_tname(v)}")


MAX_STR_BYTES = 65536  # longest string (any field, any map key), in UTF-8 bytes


def check_str(v):
    if not isinstance(v, str):
        raise SchemaError(f"must be a string, got {_tname(v)}")
    if len(v) * 4 > MAX_STR_BYTES and len(v.encode("utf-8", "surrogatepass")) > MAX_STR_BYTES:
        # what a receiver refuses (docs/wire.md section 1) is never sent
        raise SchemaError(
            f"string of {len(v.encode('utf-8', 'surrogatepass'))} bytes is over "
            f"the {MAX_STR_BYTES}-byte limit; send less text"
        )


def check_name(v):
    """Topic/src/node names: 1..128 printable ASCII characters without spaces."""
    if type(v) is str and v in _good_names:  # names repeat every message: check each once
        return
    check_str(v)
    if not (0 < len(v) <= MAX_NAME_CHARS and v.isascii() and v.isprintable()) or " " in v:
        raise SchemaError(
            f"{v[:40]!r} is not a valid name: use 1..{MAX_NAME_CHARS} "
            "printable ASCII characters without spaces"
        )
    if type(v) is str and len(_good_names) < _CACHE_MAX:  # no subclass: it could lie in __eq__
        _good_names.add(v)


def check_map(value_check):
    """A map with string keys whose values all pass value_check."""

    def check(v):
        if not isinstance(v, dict):
            raise SchemaError(f"must be a map, got {_tname(v)}")
        key = None
        try:
            for key, x in v.items():
                if type(key) is not str:
                    raise SchemaError(
                        f"key {key!r:.40} is a {_tname(key)}; map keys must be strings"
                    )
                value_check(x)
        except SchemaError as e:
            raise (e.at(f"[{key!r:.40}]") if type(key) is str else e) from None

    return check


def _words(word: bytes, n: int) -> int:
    return int.from_bytes(word * n, "little")


# Per element count n <= SMALL_ARRAY: n little-endian float32 words of (exponent bits, 1, sign bit).
_F32_MASKS = tuple(
    (_words(b"\x00\x00\x80\x7f", n), _words(b"\x01\x00\x00\x00", n), _words(b"\x00\x00\x00\x80", n))
    for n in range(SMALL_ARRAY + 1)
)
_F32_LE = np.dtype("<f4")


def f32_finite(raw: bytes, count: int) -> bool:
    """True if `raw`, `count` <= SMALL_ARRAY little-endian float32 values, holds no NaN or inf.

    One integer over all the words, not a float per value: a value is NaN or inf exactly
    when its exponent bits are all ones, i.e. its word of `(x & exp) ^ exp` is zero, and the
    words of z = that are each < 2**31, so `(z - ones) & ~z & signs` is non-zero exactly when
    one of them is zero (the borrow of a subtraction starts only at a zero word).
    """
    exp, ones, signs = _F32_MASKS[count]
    z = (int.from_bytes(raw, "little") & exp) ^ exp
    return not ((z - ones) & ~z & signs)


def all_finite(arr: np.ndarray) -> bool:
    """True if a float array holds no NaN or inf. Never warns, whatever the values.

    Small arrays: little-endian float32 through f32_finite (a few integer operations on its
    bytes, which cost less than a float per value, the more so with the caches cold); else
    a NaN or inf makes the sum of the values (as Python floats) non-finite, and finite
    float16/float32 values cannot overflow a double sum of <= SMALL_ARRAY terms; a float64
    sum can, so a non-finite float64 sum is confirmed with np.isfinite.
    """
    if arr.size <= SMALL_ARRAY:
        if arr.dtype is _F32_LE:  # the one float32 dtype object (a cheap test)
            return f32_finite(arr.tobytes(), arr.size)
        if math.isfinite(sum((arr if arr.ndim == 1 else arr.reshape(-1)).tolist())):
            return True
        if arr.dtype.itemsize < 8:
            return False
    return bool(np.isfinite(arr).all())


def check_array(dtype=None, kinds="biuf", ndim=None, nonempty=False):
    """An ndarray (wire ext type 1 or 2); float arrays must be finite everywhere."""
    want = None if dtype is None else np.dtype(dtype)  # byte order is the encoder's business
    if want is not None and want.kind not in kinds:  # check() relies on this
        raise ValueError(f"dtype {want} contradicts kinds {kinds!r}")

    def check(v):
        if type(v) is not np.ndarray:
            raise ArrayError(f"must be an ndarray, got {_tname(v)}")
        dt = v.dtype
        kind = dt.kind
        if dt is not want:  # identity: decoded arrays carry the wire's dtype objects
            if want is not None and (kind != want.kind or dt.itemsize != want.itemsize):
                raise ArrayError(f"dtype {dt} is not allowed here: must be {want}")
            if kind not in kinds:
                raise ArrayError(f"dtype {dt} is not allowed here: kind must be one of {kinds!r}")
        if ndim is not None and v.ndim != ndim:
            raise ArrayError(f"shape {v.shape} has {v.ndim} dims: must have {ndim}")
        if nonempty and v.size == 0:
            raise ArrayError("is empty: must hold at least one element")
        if kind == "f" and not all_finite(v):
            raise ArrayError(
                "contains NaN or inf: only finite floats are accepted; "
                "fix or clip the producer's output before publishing"
            )

    return check


u64 = check_int(0, U64_MAX, "in [0, 2**64-1]")
i64 = check_int(I64_MIN, I64_MAX, "in [-2**63, 2**63-1]")
ns = check_int(0, I64_MAX, "in [0, 2**63-1] (monotonic nanoseconds)")
positive_ns = check_int(1, I64_MAX, "in [1, 2**63-1] (nanoseconds)")
_stamps_map = check_map(ns)


def stamps(v):
    """name -> monotonic ns. Plain int values pass inline; anything else gets the full check."""
    if type(v) is dict:
        for k, t in v.items():
            if type(k) is not str or type(t) is not int or not 0 <= t <= I64_MAX:
                break
        else:
            return
    _stamps_map(v)


def _check_command(v):
    check_str(v)
    if v not in COMMANDS:
        raise SchemaError(f"{v[:40]!r} is not a command: must be one of {sorted(COMMANDS)}")


def _check_echo(v):
    validate_fields(_ECHO, v, "")


def _heartbeat_cross(body):
    echo = body.get("echo")
    if echo is not None and echo["recv_ns"] > body["sent_ns"]:
        raise SchemaError(
            f"{echo['recv_ns']} is after the echo's sent_ns ({body['sent_ns']}): a "
            "node answers a ping after it received it, on one clock",
            "body.echo.recv_ns",
        )


def _chunk_cross(body):
    if body["index"] >= body["count"]:
        raise SchemaError(
            f"{body['index']} is out of range: must be < count ({body['count']})", "body.index"
        )
    if body.get("executes", 0) > body["count"]:  # an executed horizon within its chunk
        raise SchemaError(
            f"{body['executes']} is out of range: must be <= count ({body['count']})",
            "body.executes",
        )
    if "tokens" in body and body["tokens"].shape != body["values"].shape:
        raise ArrayError(
            f"tokens shape {body['tokens'].shape} differs from values shape "
            f"{body['values'].shape}: both must be (D,)",
            "body.tokens",
        )


_FRAME: tuple[dict, frozenset[str], None] = (
    {"image": check_array(dtype=np.uint8, ndim=3, nonempty=True), "capture_ns": ns},
    frozenset(),
    None,
)


def _check_frames(v):
    """obs frames: camera name -> {image: uint8 [H, W, C], capture_ns}, at least one."""
    if not isinstance(v, dict) or not v:
        raise SchemaError(
            f"must be a non-empty map of camera name -> frame, got "
            f"{_tname(v) if not isinstance(v, dict) else 'an empty map'}; "
            "leave `frames` out when there are none"
        )
    for camera, frame in v.items():
        try:
            check_name(camera)
        except SchemaError as e:
            raise e.at(f"[{camera!r:.40}]") from None
        validate_fields(_FRAME, frame, f"[{camera!r:.40}]")


# real-time chunking (rtinfer.transport.committed): the robot's committed prefix in an obs,
# and the prefix a chunk was conditioned on in each of its waypoints
_COMMITTED: tuple = (
    {
        "chunk": u64,
        "from": u64,
        "values": check_array(dtype=np.float32, ndim=2, nonempty=True),
        "start_ns": ns,
    },
    frozenset(),
    None,
)
HASH_CHARS = frozenset("0123456789abcdef")


def _check_prefix_hash(v):
    check_str(v)
    if len(v) != 16 or not HASH_CHARS.issuperset(v):
        raise SchemaError(
            f"{v[:40]!r} is not a prefix hash: must be 16 lowercase hex digits "
            "(sha256 of the committed values, docs/wire.md section 5)"
        )


_CONDITIONED: tuple = (
    {"chunk": u64, "from": u64, "n": check_int(1, U64_MAX, ">= 1"), "hash": _check_prefix_hash},
    frozenset(),
    None,
)


def _check_committed(v):
    validate_fields(_COMMITTED, v, "")


def _check_conditioned(v):
    validate_fields(_CONDITIONED, v, "")


# topic kind -> (field checks, optional field names, cross-field check or None)
_ECHO: tuple[dict, frozenset[str], None] = (
    {"src": check_name, "seq": u64, "sent_ns": ns, "recv_ns": ns},
    frozenset(),
    None,
)
BODIES = {
    "obs": (
        {
            "values": check_map(check_array()),
            "ints": check_map(i64),
            "frames": _check_frames,
            "committed": _check_committed,
            "open_loop_ns": positive_ns,
        },
        frozenset({"frames", "committed", "open_loop_ns"}),
        None,
    ),
    "action_chunk": (
        {
            "cycle": u64,
            "index": u64,
            "count": check_int(1, U64_MAX, ">= 1"),
            "dest": check_name,
            "values": check_array(dtype=np.float32, ndim=1, nonempty=True),
            "tokens": check_array(kinds="iu", ndim=1, nonempty=True),
            "spec": check_str,
            "period_ns": positive_ns,
            "start_ns": ns,
            "conditioned": _check_conditioned,
            "executes": check_int(1, U64_MAX, ">= 1"),
            "obs_period_ns": positive_ns,
        },
        frozenset({"tokens", "conditioned", "executes", "obs_period_ns"}),
        _chunk_cross,
    ),
    "heartbeat": (
        {"node": check_name, "sent_ns": ns, "echo": _check_echo},
        frozenset({"echo"}),
        _heartbeat_cross,
    ),
    "health": (
        {
            "node": check_name,
            "state": check_str,
            "counters": check_map(u64),
            "gauges": check_map(check_float),
        },
        frozenset(),
        None,
    ),
    "budget": ({"level": check_int(0, I64_MAX, ">= 0"), "reason": check_str}, frozenset(), None),
    "command": ({"cmd": _check_command, "reason": check_str}, frozenset(), None),
    "trace": (
        {"node": check_name, "cycle": u64, "stamps": stamps, "fields": check_map(check_float)},
        frozenset(),
        None,
    ),
}


def validate_fields(spec, body, where: str) -> None:
    """Check a map against (fields, optional, cross): exact key set, then each value."""
    fields, optional, cross = spec
    if not isinstance(body, dict):
        raise SchemaError(f"must be a map, got {_tname(body)}", where)
    if body.keys() != fields.keys():
        missing = fields.keys() - body.keys() - optional
        unknown = [k for k in body if k not in fields]
        if unknown:
            raise SchemaError(
                f"unknown field(s) {sorted(map(repr, unknown))[:8]}: "
                f"allowed fields are {sorted(fields)}",
                where,
            )
        if missing:
            raise SchemaError(
                f"missing field(s) {sorted(missing)}: all of "
                f"{sorted(set(fields) - optional)} are required",
                where,
            )
    name = None
    try:
        for name, v in body.items():
            fields[name](v)
    except SchemaError as e:
        raise e.at(f"{where}.{name}") from None
    if cross is not None:
        cross(body)


def topic_kind(topic: str) -> str:
    """The body schema a topic uses: the part before the first '/' ('obs/cell1' -> 'obs')."""
    return topic.partition("/")[0]


def _plan(spec) -> tuple:
    """spec + (int fields as (name, lo, hi), other fields as (name, check)), built once."""
    fields = spec[0]
    ints = tuple((n, *c.int_range) for n, c in fields.items() if hasattr(c, "int_range"))
    others = tuple((n, c) for n, c in fields.items() if not hasattr(c, "int_range"))
    return (*spec, ints, others)


_PLANS = {kind: _plan(spec) for kind, spec in BODIES.items()}


def body_spec(topic: str) -> tuple:
    """The compiled schema of `topic`'s kind (for check_body), memoised. Raises TopicError."""
    plan = _plan_by_topic.get(topic)
    if plan is None:
        plan = _PLANS.get(topic_kind(topic))
        if plan is None:
            raise TopicError(
                f"unknown topic {topic[:40]!r}: the topic (before any '/') must "
                f"be one of {sorted(BODIES)}"
            )
        if type(topic) is str and len(_plan_by_topic) < _CACHE_MAX:
            _plan_by_topic[topic] = plan
    return plan


def check_body(plan: tuple, body) -> None:
    """validate_fields for a compiled plan: same rules, fewer calls on the common path."""
    fields, optional, cross, ints, others = plan
    if type(body) is not dict or body.keys() != fields.keys():  # optional field left out,
        return validate_fields(plan[:3], body, "body")  # or an error to explain
    name = None
    try:
        for name, lo, hi in ints:
            v = body[name]
            if type(v) is not int or not lo <= v <= hi:
                fields[name](v)  # raises, or accepts a numpy integer (encode side)
        for name, check in others:
            check(body[name])
    except SchemaError as e:
        raise e.at(f"body.{name}") from None
    if cross is not None:
        cross(body)


def validate_body(topic: str, body) -> None:
    """Check `body` against the schema of `topic`'s kind. Raises TopicError/SchemaError."""
    check_body(body_spec(topic), body)
