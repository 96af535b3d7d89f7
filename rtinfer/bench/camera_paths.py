"""The frame paths of `rtinfer bench camera`: one sender and one receiver per path.

Every path carries (seq, capture_ns, uint8 [H, W, 3] frame). A receiver's `take(timeout_ms)`
returns (seq, capture_ns, array, decode_ns) once it holds a numpy array over the frame's
bytes, or None. decode_ns is the JPEG decode's share (0 elsewhere).

  bus_ipc      rtinfer's bus over ipc: the frame is an out-of-band array (wire ext 2), sent
               and received without a Python-level copy (Publisher/Subscriber)
  bus_shm      rtinfer's bus over shm:// (iceoryx2 underneath): the same Publisher/Subscriber
               and messages, one copy of the frame into a loaned sample, decoded in place
  zmq_copy_ipc plain pyzmq over ipc, copying on send and on receive (copy=True)
  iceoryx2     iceoryx2 shared memory: the sender copies the frame into a loaned sample once,
               the receiver views it in place; an iceoryx2 event wakes the receiver
  bus_tcp      rtinfer's bus over tcp loopback, as bus_ipc
  jpeg_tcp     libjpeg-turbo (simplejpeg) encode, rtinfer's bus over tcp, decode
"""

from __future__ import annotations

import ctypes
import struct
import time

import numpy as np
import zmq

TOPIC = "obs/camera"
CAMERA = "overhead"
JPEG_QUALITY = 90
PATHS = ("bus_ipc", "bus_shm", "zmq_copy_ipc", "iceoryx2", "bus_tcp", "jpeg_tcp")
LOSSLESS = ("bus_ipc", "bus_shm", "zmq_copy_ipc", "iceoryx2", "bus_tcp")
BUS = ("bus_ipc", "bus_shm", "bus_tcp", "jpeg_tcp")  # rtinfer's Publisher/Subscriber
_HEAD = struct.Struct("<QQ")  # seq, capture_ns: the first 16 bytes of a raw or iceoryx2 frame
POOL = 8  # distinct frames per shape, frame seq % POOL


def frame_pool(shape: tuple[int, int, int]) -> list[np.ndarray]:
    """POOL deterministic frames that look like a camera's (smooth floor, a dark belt, a few
    coloured blocks that move with the index, light noise), not like noise: JPEG sizes and
    costs are those of a scene. The receiver builds the same pool to check the bytes."""
    h, w, _ = shape
    rng = np.random.default_rng(h * 10_000 + w)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([180 + 40 * xx / w, 180 + 30 * yy / h, np.full((h, w), 170.0)], -1)
    base[(yy > 0.35 * h) & (yy < 0.65 * h)] = 40.0  # the belt
    out = []
    for i in range(POOL):
        img = base.copy()
        for k, colour in enumerate(((220, 50, 40), (50, 180, 60), (50, 90, 230))):
            x0 = int((0.1 + 0.25 * k + 0.03 * i) * w) % max(1, w - w // 8)
            y0 = int(0.4 * h)
            img[y0 : y0 + h // 8, x0 : x0 + w // 8] = colour
        img += rng.normal(0, 3, img.shape)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def _zmq(kind: int, endpoint: str, bind: bool) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM if kind == zmq.PUB else zmq.RCVHWM, 100)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    (sock.bind if bind else sock.connect)(endpoint)
    return sock


# -- senders: send(seq, frame, capture_ns) -> encode_ns (0 where there is no encoding) ------
class BusSender:
    def __init__(self, endpoint: str, jpeg: bool = False):
        from rtinfer.transport.bus import Publisher

        # oob_bytes=1024: even a 96x96 frame (27 KiB) travels as its own frame, not inline.
        self.pub = Publisher(endpoint, "bench", bind=False, oob_bytes=1024, hwm=100)
        self.jpeg = jpeg

    def send(self, seq: int, frame: np.ndarray, capture_ns: int) -> int:
        enc = 0
        if self.jpeg:
            import simplejpeg

            data = simplejpeg.encode_jpeg(frame, quality=JPEG_QUALITY, colorspace="RGB")
            enc = time.monotonic_ns() - capture_ns
            body = {
                "values": {CAMERA + "_jpeg": np.frombuffer(data, np.uint8)},
                "ints": {"seq": seq},
            }
        else:
            body = {"values": {CAMERA: frame}, "ints": {"seq": seq}}
        self.pub.publish(TOPIC, body, {"capture": capture_ns})
        return enc

    def close(self) -> None:
        self.pub.close()


class ZmqCopySender:
    def __init__(self, endpoint: str):
        self.sock = _zmq(zmq.PUB, endpoint, bind=False)

    def send(self, seq: int, frame: np.ndarray, capture_ns: int) -> int:
        self.sock.send(_HEAD.pack(seq, capture_ns), zmq.NOBLOCK | zmq.SNDMORE)
        self.sock.send(frame, zmq.NOBLOCK, copy=True)
        return 0

    def close(self) -> None:
        self.sock.close()


class IceoryxSender:
    def __init__(self, service: str, nbytes: int):
        import iceoryx2 as iox2

        self.node = _iox_node(iox2)
        pubsub, event = _iox_services(iox2, self.node, service)
        self.pub = pubsub.publisher_builder().initial_max_slice_len(nbytes + _HEAD.size).create()
        self.notifier = event.notifier_builder().create()
        self.nbytes = nbytes

    def send(self, seq: int, frame: np.ndarray, capture_ns: int) -> int:
        sample = self.pub.loan_slice_uninit(self.nbytes + _HEAD.size)
        view = sample.payload().as_memory_view()
        _HEAD.pack_into(view, 0, seq, capture_ns)
        np.copyto(np.frombuffer(view, np.uint8, self.nbytes, _HEAD.size), frame.reshape(-1))
        sample.assume_init().send()
        self.notifier.notify()
        return 0

    def close(self) -> None:
        self.notifier.delete()
        self.pub.delete()


def _iox_node(iox2):
    iox2.set_log_level_from_env_or(iox2.LogLevel.Error)  # no "no config file" line per process
    return iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)


def _iox_services(iox2, node, service: str):
    pubsub = (
        node.service_builder(iox2.ServiceName.new(service))
        .publish_subscribe(iox2.Slice[ctypes.c_uint8])
        .subscriber_max_buffer_size(4)
        .history_size(0)
        .open_or_create()
    )
    event = node.service_builder(iox2.ServiceName.new(service + "/ev")).event().open_or_create()
    return pubsub, event


def make_sender(path: str, endpoint: str, nbytes: int):
    if path in BUS:
        return BusSender(endpoint, jpeg=path == "jpeg_tcp")
    if path == "zmq_copy_ipc":
        return ZmqCopySender(endpoint)
    return IceoryxSender(endpoint, nbytes)


# -- receivers: take(timeout_ms) -> (seq, capture_ns, array, decode_ns) | None ----------------
class BusReceiver:
    def __init__(self, endpoint: str, shape, jpeg: bool = False):
        from rtinfer.transport.bus import Subscriber

        self.sub = Subscriber(endpoint, [TOPIC], bind=True, hwm=100)
        self.jpeg = jpeg

    def take(self, timeout_ms: int):
        env = self.sub.recv(timeout_ms=timeout_ms)
        if env is None:
            return None
        values, dec = env.body["values"], 0
        if self.jpeg:
            import simplejpeg

            t = time.monotonic_ns()
            arr = simplejpeg.decode_jpeg(values[CAMERA + "_jpeg"], colorspace="RGB")
            dec = time.monotonic_ns() - t
        else:
            arr = values[CAMERA]
        return env.body["ints"]["seq"], env.stamps["capture"], arr, dec


class ZmqCopyReceiver:
    def __init__(self, endpoint: str, shape):
        self.sock, self.shape = _zmq(zmq.SUB, endpoint, bind=True), shape

    def take(self, timeout_ms: int):
        if not self.sock.poll(timeout_ms):
            return None
        head, data = self.sock.recv_multipart(copy=True)
        seq, capture = _HEAD.unpack(head)
        return seq, capture, np.frombuffer(data, np.uint8).reshape(self.shape), 0


class IceoryxReceiver:
    def __init__(self, service: str, shape):
        import iceoryx2 as iox2

        self.iox2 = iox2
        self.node = _iox_node(iox2)
        pubsub, event = _iox_services(iox2, self.node, service)
        self.sub = pubsub.subscriber_builder().create()
        self.listener = event.listener_builder().create()
        self.shape, self.nbytes = shape, int(np.prod(shape))
        self.held = None  # the sample the last array views: released when the next is taken

    def take(self, timeout_ms: int):
        sample = self.sub.receive()
        if sample is None:
            self.listener.timed_wait(self.iox2.Duration.from_millis(timeout_ms))
            sample = self.sub.receive()
            if sample is None:
                return None
        view = sample.payload().as_memory_view()
        seq, capture = _HEAD.unpack_from(view, 0)
        arr = np.frombuffer(view, np.uint8, self.nbytes, _HEAD.size).reshape(self.shape)
        arr.flags.writeable = False  # a view of shared memory other processes read too
        self.held = sample
        return seq, capture, arr, 0


def make_receiver(path: str, endpoint: str, shape):
    if path in BUS:
        return BusReceiver(endpoint, shape, jpeg=path == "jpeg_tcp")
    if path == "zmq_copy_ipc":
        return ZmqCopyReceiver(endpoint, shape)
    return IceoryxReceiver(endpoint, shape)
