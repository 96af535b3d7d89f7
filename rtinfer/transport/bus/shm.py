"""shm://NAME: the bus over shared memory (iceoryx2) between processes of one host.

A message is one iceoryx2 sample that holds what ZeroMQ carries as a multipart message: the
topic frame and ``wire.encode_frames``'s frames (envelope, out-of-band arrays), behind a small
header (docs/wire.md, "Shared memory"). The publisher writes them into a loaned sample (one
copy of each array, into memory the subscribers map) and wakes the subscribers with an
iceoryx2 event; a subscriber decodes in place, its out-of-band arrays read-only views of the
sample. iceoryx2 is the optional extra ``rtinfer[shm]``: nothing here imports it before an
shm endpoint is opened, and without it opening one raises ShmUnavailable, one line with
the fix. Not thread-safe.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from collections.abc import Sequence

from rtinfer.transport.bus.ipc import EndpointInUse
from rtinfer.transport.bus.sockets import closed
from rtinfer.transport.curve import CurveConfig

SHM = "shm://"
# Per service; both sides open it with these, so any two rtinfer processes agree. Each
# publisher preallocates MAX_SUBSCRIBERS x (QUEUE + HELD) + 2 samples of its largest message.
MAX_PUBLISHERS = 8
MAX_SUBSCRIBERS = 8
QUEUE = 8  # a subscriber's queue: newer samples push the oldest out (safe overflow)
HELD = 8  # samples one subscriber may hold at once (messages whose arrays are still alive)
MAX_NAME_BYTES = 240  # iceoryx2's service names hold 255: "rtinfer/" NAME "/wake"
ALIGN = 64  # every frame starts at a multiple of this from the sample's start
MAGIC = b"rtb1"
HEAD = struct.Struct("<4sHH")  # magic, topic length, frame count; then the u64 frame lengths


class ShmUnavailable(ImportError):
    """An shm:// endpoint was opened without iceoryx2 installed."""


def is_shm(endpoint: str) -> bool:
    return endpoint.startswith(SHM)


def iceoryx2(endpoint: str):
    """The iceoryx2 module, or ShmUnavailable naming the endpoint and the fix."""
    try:
        import iceoryx2 as iox2  # the optional extra: loaded only for an shm endpoint
    except ImportError:
        raise ShmUnavailable(
            f"{endpoint} needs iceoryx2 (shared memory), which is not "
            "installed: pip install 'rtinfer[shm]', or use an ipc:// "
            "endpoint"
        ) from None
    return iox2


def refuse_curve(endpoint: str, curve) -> None:
    """shm never leaves the host and has no CURVE: refuse a config that asks for it."""
    cfg = curve if isinstance(curve, CurveConfig) or curve is None else curve.get(endpoint)
    if cfg is not None:
        raise ValueError(
            f"{endpoint} is shared memory on one host and has no CURVE: give "
            "CURVE only to tcp:// endpoints (curve={tcp endpoint: config})"
        )


class Service:
    """The two iceoryx2 services of one endpoint: publish-subscribe for the samples, an
    event to wake subscribers. Opened (created by whichever side comes first) per socket."""

    def __init__(self, endpoint: str) -> None:
        name = endpoint[len(SHM) :]
        if not 0 < len(name.encode()) <= MAX_NAME_BYTES:
            raise ValueError(
                f"{endpoint!r}: an shm endpoint names its service in 1 to "
                f"{MAX_NAME_BYTES} bytes, e.g. shm://obs"
            )
        iox2 = self.iox2 = iceoryx2(endpoint)
        iox2.set_log_level_from_env_or(iox2.LogLevel.Error)  # no "no config file" per process
        self.node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
        try:
            self.samples = (
                self.node.service_builder(iox2.ServiceName.new(f"rtinfer/{name}"))
                .publish_subscribe(iox2.Slice[ctypes.c_uint8])
                .payload_alignment(iox2.Alignment.new(ALIGN))
                .max_publishers(MAX_PUBLISHERS)
                .max_subscribers(MAX_SUBSCRIBERS)
                .subscriber_max_buffer_size(QUEUE)
                .subscriber_max_borrowed_samples(HELD)
                .history_size(0)
                .enable_safe_overflow(True)
                .open_or_create()
            )
            self.wake = (
                self.node.service_builder(iox2.ServiceName.new(f"rtinfer/{name}/wake"))
                .event()
                .max_notifiers(MAX_PUBLISHERS)
                .max_listeners(MAX_SUBSCRIBERS)
                .open_or_create()
            )
        except Exception as e:  # iceoryx2's errors name the case, not the endpoint
            raise OSError(
                f"{endpoint}: iceoryx2 could not open its service ({e!r}); another "
                "program uses the name with other settings, or a run left it behind: "
                "give this run its own name"
            ) from None


def layout(topic_b: bytes, sizes: Sequence[int]) -> tuple[list[int], int]:
    """(offsets of the frames, sample length) for a topic frame and frame sizes."""
    at = HEAD.size + 8 * len(sizes) + len(topic_b)
    offsets = []
    for size in sizes:
        at = -(-at // ALIGN) * ALIGN
        offsets.append(at)
        at += size
    return offsets, at


def payload(sample, size: int):
    """The sample's ``size`` payload bytes as a ctypes array (writable; payload().as_memory_view()
    has format '<B', which memoryview cannot assign to, and builds a Python object more)."""
    return (ctypes.c_uint8 * size).from_address(sample.payload_ptr)


class ShmSender:
    """The sending half of an shm endpoint: one sample per message, then a wake-up."""

    def __init__(self, endpoint: str, *, alone: bool) -> None:
        """alone: refuse (EndpointInUse) a service another live publisher is on, as binding
        an ipc endpoint refuses one another process holds: two runs on one name would
        interleave their messages. Publishers of processes that died do not count (iceoryx2
        cleans them up when the service is opened)."""
        self._pub = None
        self._endpoint = endpoint
        self._service = svc = Service(endpoint)
        if alone and svc.samples.dynamic_config.number_of_publishers > 0:
            raise EndpointInUse(
                errno.EADDRINUSE,
                f"{endpoint} has a live publisher already; "
                "give this run its own name, stop the other run first, or "
                "publish with bind=False to share the name on purpose",
            )
        iox2 = svc.iox2
        self._loan_error = iox2.LoanError
        self._pub = (
            svc.samples.publisher_builder()
            .initial_max_slice_len(65536)
            .allocation_strategy(iox2.AllocationStrategy.PowerOfTwo)
            .backpressure_strategy(iox2.BackpressureStrategy.DiscardData)
            .create()
        )
        self._notifier = svc.wake.notifier_builder().create()

    def send(self, topic_b: bytes, frames: list) -> bool:
        """Write the message into one sample and send it; False if no sample could be loaned
        (the publisher's memory is exhausted). Never blocks."""
        sizes = [f.nbytes if isinstance(f, memoryview) else len(f) for f in frames]
        offsets, length = layout(topic_b, sizes)
        if self._pub is None:
            raise closed(self._endpoint)
        try:
            sample = self._pub.loan_slice_uninit(length)
        except self._loan_error:
            return False
        out = memoryview(payload(sample, length)).cast("B")
        HEAD.pack_into(out, 0, MAGIC, len(topic_b), len(frames))
        struct.pack_into(f"<{len(sizes)}Q", out, HEAD.size, *sizes)
        at = HEAD.size + 8 * len(frames)
        out[at : at + len(topic_b)] = topic_b
        for frame, start, size in zip(frames, offsets, sizes):
            out[start : start + size] = frame.cast("B") if isinstance(frame, memoryview) else frame
        sample.assume_init().send()
        self._notifier.notify()
        return True

    def close(self) -> None:
        if self._pub is not None:
            self._notifier.delete()
            self._pub.delete()
            self._pub = None
