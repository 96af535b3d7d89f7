"""The newest frame of one camera from ROS 2, checked: what the bridge hands its observation.

sensor_msgs/Image in `rgb8` or `bgr8` (turned into RGB), or sensor_msgs/CompressedImage
whose format names jpeg (decoded with Pillow, on the ROS thread), exactly `shape` [H, W, 3].
The frame's header stamp is moved onto this host's monotonic clock: its capture. Refused,
counted and said once per kind (the previous frame stays the newest): another encoding or
format, another size, a truncated buffer, or an undecodable jpeg (frame_bad); a stamp more
than `future_ns` ahead of this host's clock (frame_future). take() gives None, counting each
silence once (frame_silent), while there is no frame or the newest is older than
`silent_ns`: the observation then waits (the policy node would refuse an old frame anyway).
"""

from __future__ import annotations

import io
import threading
import time

import numpy as np

from .refusals import Refusals, say
from .refusals import capture_ns as to_monotonic

REFUSALS = ("frame_bad", "frame_future")
ENCODINGS = ("rgb8", "bgr8")


def jpeg_decoder():
    """Pillow's jpeg decoder (bytes -> RGB uint8 [H, W, 3]), or None without Pillow."""
    try:
        from PIL import Image
    except ImportError:
        return None
    return lambda data: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


class LatestImage:
    """on_image() / on_compressed() from the ROS thread; take() from the control loop (a
    short lock). The frames handed over are new arrays, never changed afterwards."""

    def __init__(
        self, camera: str, topic: str, shape, future_ns: int, silent_ns: int, decode_jpeg=None
    ):
        self.camera, self.topic, self.shape = camera, topic, tuple(shape)
        self.future_ns, self.silent_ns, self.decode_jpeg = future_ns, silent_ns, decode_jpeg
        self.counters = {"frames": 0, "frame_silent": 0}
        self._refuse = Refusals(f"a frame of camera {camera!r} on {topic}", REFUSALS, self.counters)
        self._lock = threading.Lock()
        self._frame: tuple[np.ndarray, int] | None = None
        self._silent = False

    def on_image(self, msg) -> None:
        recv_ns, wall_ns = time.monotonic_ns(), time.time_ns()
        h, w, c = self.shape
        if (
            msg.encoding not in ENCODINGS
            or (msg.height, msg.width) != (h, w)
            or msg.step < w * c
            or len(msg.data) < h * msg.step
        ):
            return self._refuse(
                "frame_bad",
                f"{msg.encoding} {msg.height}x{msg.width} (step "
                f"{msg.step}, {len(msg.data)} bytes), want rgb8 or bgr8 "
                f"{h}x{w}; publish that size, or resize before the bridge",
            )
        image = np.frombuffer(msg.data, np.uint8, h * msg.step).reshape(h, msg.step)
        image = image[:, : w * c].reshape(h, w, c)  # without the rows' padding
        image = (
            image[..., ::-1].copy() if msg.encoding == "bgr8" else np.ascontiguousarray(image)
        )  # no copy unless rows were padded
        self._take(image, msg.header.stamp, recv_ns, wall_ns)

    def on_compressed(self, msg) -> None:
        recv_ns, wall_ns = time.monotonic_ns(), time.time_ns()
        if "jpeg" not in msg.format and "jpg" not in msg.format:
            return self._refuse(
                "frame_bad",
                f"format {msg.format!r}: only jpeg is decoded; "
                "publish jpeg, or the raw sensor_msgs/Image",
            )
        try:
            image = self.decode_jpeg(bytes(msg.data))
        except (OSError, ValueError) as e:
            return self._refuse("frame_bad", f"not a decodable jpeg ({e})")
        if image.shape != self.shape:
            return self._refuse(
                "frame_bad",
                f"a {image.shape} image, want {self.shape}; "
                "publish that size, or resize before the bridge",
            )
        self._take(image, msg.header.stamp, recv_ns, wall_ns)

    def _take(self, image: np.ndarray, stamp, recv_ns: int, wall_ns: int) -> None:
        capture_ns = to_monotonic(stamp, recv_ns, wall_ns)
        if capture_ns > recv_ns + self.future_ns:
            return self._refuse(
                "frame_future",
                f"stamp {(capture_ns - recv_ns) / 1e6:.1f} ms "
                "in the future; check the camera host's clock (chrony/NTP)",
            )
        with self._lock:
            self._frame = (image, capture_ns)
            self.counters["frames"] += 1

    def take(self, now_ns: int) -> tuple[np.ndarray, int] | None:
        """(the newest image, its capture ns), or None: none yet, or older than silent_ns."""
        with self._lock:
            frame = self._frame
        silent = frame is None or now_ns - frame[1] > self.silent_ns
        if silent and not self._silent:
            self.counters["frame_silent"] += 1
            if self.counters["frame_silent"] == 1:
                say(
                    f"camera {self.camera!r} on {self.topic}: no frame newer than "
                    f"{self.silent_ns / 1e6:g} ms: the observation waits "
                    "(counted as frame_silent; said once)"
                )
        self._silent = silent
        return None if silent else frame
