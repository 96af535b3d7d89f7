"""ndarrays as msgpack ext types: inline (ext 1) and out-of-band in a later frame (ext 2).

Payload of both ext types (all integers little-endian; see docs/wire.md):
    u8 dtype code | u8 ndim | 6 zero bytes | ndim x u64 dims | ext 1: raw C-order data
                                                             | ext 2: u64 frame index
The header is a multiple of 8 bytes so the data that follows stays 8-byte aligned in the
buffer msgpack hands the ext hook. Decoding is np.frombuffer on that buffer (or on the
frame): no copy, and the result is read-only. Not thread-safe only in the sense that an
`OobPacker`/`OobHook` belongs to one encode/decode call.
"""

import math
import struct
import sys

import msgpack
import numpy as np

from rtinfer.transport.schema import ArrayError, MalformedError

EXT_ARRAY = 1
EXT_ARRAY_OOB = 2
MAX_NDIM = 8
# dtype code -> dtype; the code is the index. Append only: codes are part of the protocol.
DTYPES = tuple(
    np.dtype(s)
    for s in ("|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8")
)
_CODE = {(dt.kind, dt.itemsize): code for code, dt in enumerate(DTYPES)}
# dtype.num -> code for native little-endian dtypes ('l' and 'q' are both int64): a lookup
# by num avoids hashing the dtype, which is slow when the caches are cold.
_CODE_BY_NUM = (
    {}
    if sys.byteorder != "little"
    else {
        np.dtype(c).num: _CODE[np.dtype(c).kind, np.dtype(c).itemsize]
        for c in np.typecodes["All"]
        if (np.dtype(c).kind, np.dtype(c).itemsize) in _CODE and np.dtype(c).kind in "biuf"
    }
)
_ITEMSIZE = tuple(dt.itemsize for dt in DTYPES)
_HEAD = [struct.Struct(f"<BBHI{n}Q") for n in range(MAX_NDIM + 1)]
_HEAD1 = _HEAD[1]
_FRAME_INDEX = struct.Struct("<Q")


def _wire_form(arr: np.ndarray) -> tuple[int, np.ndarray]:
    """(dtype code, C-contiguous little-endian array); copies only when it must."""
    code = _CODE.get((arr.dtype.kind, arr.dtype.itemsize))
    if code is None or arr.dtype.kind not in "biuf":
        raise ArrayError(
            f"dtype {arr.dtype} is not on the wire allow-list: use one of "
            f"{[str(d) for d in DTYPES]}"
        )
    if arr.ndim > MAX_NDIM:
        raise ArrayError(f"array has {arr.ndim} dims: at most {MAX_NDIM} are allowed; reshape it")
    return code, np.asarray(arr, DTYPES[code], order="C")


def _check_bool(arr: np.ndarray) -> None:
    """A bool array built by viewing other bytes as bool can hold bytes other than 0 and 1;
    the receiver rejects such an array, so the sender refuses it with the reason."""
    if arr.size and arr.view(np.uint8).max() > 1:
        raise ArrayError(
            "bool array holds bytes other than 0 and 1 (a view of other bytes "
            "as bool?): send arr != 0 instead"
        )


def _header(code: int, arr: np.ndarray) -> bytes:
    return _HEAD[arr.ndim].pack(code, arr.ndim, 0, 0, *arr.shape)


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    # tuple.__new__ skips ExtType.__new__'s Python-level argument checks (~0.2 us a call);
    # code is one of our constants and data is always bytes here.
    return tuple.__new__(msgpack.ExtType, (code, data))


def pack_inline(arr: np.ndarray) -> msgpack.ExtType:
    """Ext 1: header followed by the raw data, in the message itself."""
    dt = arr.dtype
    code = _CODE_BY_NUM.get(dt.num) if dt.isnative else None
    if code is None or arr.ndim > MAX_NDIM:  # byte-swap, or refuse with the reason
        code, arr = _wire_form(arr)
    if code == 0:
        _check_bool(arr)
    # tobytes() is C order whatever the strides, so strided arrays need no extra copy.
    return _ext(EXT_ARRAY, _HEAD[arr.ndim].pack(code, arr.ndim, 0, 0, *arr.shape) + arr.tobytes())


class OobPacker:
    """Msgpack `default` hook for one encode_frames call: big arrays become later frames.

    `frames` collects zero-copy memoryviews of the arrays' data; the caller must not modify
    those arrays until the frames have been sent.
    """

    def __init__(self, oob_bytes: int):
        self.oob_bytes = oob_bytes
        self.frames: list[memoryview] = []

    def __call__(self, obj):
        if isinstance(obj, np.ndarray):
            if obj.nbytes < self.oob_bytes:
                return pack_inline(obj)
            code, arr = _wire_form(obj)
            if code == 0:
                _check_bool(arr)
            self.frames.append(arr.reshape(-1).view(np.uint8).data)  # .data: its memoryview
            return _ext(EXT_ARRAY_OOB, _header(code, arr) + _FRAME_INDEX.pack(len(self.frames)))
        return default_scalar(obj)


def default_inline(obj):
    """Msgpack `default` hook for encode: arrays inline, numpy scalars as plain numbers."""
    if isinstance(obj, np.ndarray):
        return pack_inline(obj)
    return default_scalar(obj)


def default_scalar(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} on the wire")


def _parse_header(data, nbytes: int):
    """(dtype code, dims, header size) of an ext payload; checks everything but the data."""
    ndim = data[1] if nbytes >= 8 else 0
    if nbytes < 8 + 8 * ndim or ndim > MAX_NDIM:
        raise ArrayError(
            f"array ext payload of {nbytes} bytes with ndim {ndim} is malformed: "
            f"the header needs 8 + 8*ndim bytes and ndim must be <= {MAX_NDIM}"
        )
    head = _HEAD[ndim]
    code, _, r1, r2, *dims = head.unpack_from(data)
    if code >= len(DTYPES) or r1 or r2:
        raise ArrayError(
            f"array dtype code {code} is not on the allow-list "
            f"(0..{len(DTYPES) - 1}) or header bytes 2..7 are not zero"
        )
    return code, dims, head.size


def _view(buf, code: int, dims, nbytes: int, offset: int, where: str) -> np.ndarray:
    """Zero-copy array over buf[offset:offset+nbytes], after checking the byte length."""
    dt = DTYPES[code]
    count = math.prod(dims)
    if count * dt.itemsize != nbytes:
        raise ArrayError(
            f"{where} holds {nbytes} bytes but dtype {dt} x shape {tuple(dims)} "
            f"needs {count * dt.itemsize}"
        )
    arr = np.frombuffer(buf, dt, count, offset)
    if code == 0 and count and arr.view(np.uint8).max() > 1:
        raise ArrayError("bool array holds bytes other than 0 and 1")
    if len(dims) != 1:
        arr = arr.reshape(dims)
    if arr.flags.writeable:  # frames may be writable buffers: views must never write back
        arr.flags.writeable = False
    return arr


def ext_hook(code: int, data: bytes):
    """Msgpack `ext_hook` for single-frame messages (hot path: keep it lean)."""
    if code == EXT_ARRAY:
        nbytes = len(data)
        # Fast path: a 1-D non-bool array whose header and length check out. msgpack hands
        # ext payloads over as bytes, so the view is read-only already.
        if nbytes >= 16 and data[1] == 1:
            dcode, _, r1, r2, count = _HEAD1.unpack_from(data)
            if (
                0 < dcode < len(DTYPES)
                and not (r1 or r2)
                and count * _ITEMSIZE[dcode] == nbytes - 16
            ):
                return np.frombuffer(data, DTYPES[dcode], count, 16)
        dcode, dims, off = _parse_header(data, nbytes)
        return _view(data, dcode, dims, nbytes - off, off, "inline array")
    if code == EXT_ARRAY_OOB:
        raise MalformedError(
            "out-of-band array (ext 2) in a single-frame message: "
            "multipart messages must be decoded with decode_frames"
        )
    raise MalformedError(f"unknown msgpack ext type {code}: rtinfer uses only 1 and 2")


class OobHook:
    """Msgpack `ext_hook` for one decode_frames call; `check_all_used()` after unpacking."""

    def __init__(self, frames):
        self.frames = frames  # memoryviews; frames[0] is the envelope itself
        self.used = [False] * len(frames)

    def __call__(self, code: int, data: bytes):
        if code != EXT_ARRAY_OOB:
            return ext_hook(code, data)
        dcode, dims, off = _parse_header(data, len(data))
        if len(data) != off + 8:
            raise ArrayError(f"out-of-band array ext is {len(data)} bytes: expected {off + 8}")
        (index,) = _FRAME_INDEX.unpack_from(data, off)
        if not 1 <= index < len(self.frames) or self.used[index]:
            raise MalformedError(
                f"out-of-band array references frame {index}: must be an "
                f"unused frame in 1..{len(self.frames) - 1}"
            )
        self.used[index] = True
        frame = self.frames[index]
        return _view(frame, dcode, dims, frame.nbytes, 0, f"frame {index}")

    def check_all_used(self) -> None:
        unused = [i for i, u in enumerate(self.used) if i and not u]
        if unused:
            raise MalformedError(
                f"frame(s) {unused[:8]} are not referenced by the envelope: "
                "every frame after the envelope must carry one array"
            )
