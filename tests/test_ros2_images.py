"""The bridge's camera frames (rtinfer_ros2.images) on their own, without ROS 2: rgb8 taken as
it is, bgr8 turned into RGB, padded rows dropped, jpeg decoded; another encoding or size, a
truncated buffer, a stamp from the future: refused, counted, said once, the previous frame
kept; a silent camera: no frame, counted once per silence."""

from __future__ import annotations

import io
import time
from array import array
from types import SimpleNamespace

import numpy as np
import pytest

from rtinfer_ros2.images import LatestImage, jpeg_decoder

MS = 1_000_000
RGB = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)


def stamp(ahead_ns=0):
    t = time.time_ns() + ahead_ns
    return SimpleNamespace(
        header=SimpleNamespace(
            stamp=SimpleNamespace(sec=t // 1_000_000_000, nanosec=t % 1_000_000_000)
        )
    )


def image(pixels=RGB, encoding="rgb8", pad=0, ahead_ns=0, height=None):
    h, w, c = pixels.shape
    rows = np.zeros((h, w * c + pad), np.uint8)
    rows[:, : w * c] = pixels.reshape(h, -1)
    m = stamp(ahead_ns)
    m.encoding, m.height, m.width, m.step = encoding, height or h, w, w * c + pad
    m.data = array("B", rows.tobytes())  # as rclpy hands uint8[] over
    return m


def jpeg(pixels, fmt="jpeg"):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=95)
    m = stamp()
    m.format, m.data = fmt, array("B", buf.getvalue())
    return m


def camera(shape=(4, 6, 3), decode=None):
    return LatestImage(
        "wrist",
        "/arm/camera/image_raw",
        shape,
        future_ns=5 * MS,
        silent_ns=100 * MS,
        decode_jpeg=decode,
    )


def test_rgb8_is_taken_as_it_is_bgr8_as_rgb_and_padded_rows_without_the_padding():
    cam = camera()
    for msg in (image(), image(RGB[..., ::-1], "bgr8"), image(pad=5)):
        before = time.monotonic_ns()
        cam.on_image(msg)
        frame, capture_ns = cam.take(time.monotonic_ns())
        assert frame.shape == (4, 6, 3) and frame.dtype == np.uint8 and (frame == RGB).all()
        assert frame.flags.c_contiguous and before - 5 * MS < capture_ns <= time.monotonic_ns()
    assert cam.counters == {"frames": 3, "frame_silent": 0, "frame_bad": 0, "frame_future": 0}


def test_a_wrong_encoding_size_or_buffer_and_a_future_stamp_are_refused_once_each(capsys):
    cam = camera()
    cam.on_image(image())
    good = cam.take(time.monotonic_ns())[0]
    bad = [
        image(encoding="mono8"),
        image(encoding="rgba8"),
        image(height=5),
        image(RGB[:, :5]),
        image(ahead_ns=50 * MS),
    ]
    bad[3].width = 6  # says 6 columns, carries 5: truncated
    for msg in bad + bad:
        cam.on_image(msg)
    assert cam.counters["frame_bad"] == 8 and cam.counters["frame_future"] == 2
    assert cam.counters["frames"] == 1 and cam.take(time.monotonic_ns())[0] is good
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "frame_bad" in lines[0] and "mono8" in lines[0]
    assert "frame_future" in lines[1] and "clock" in lines[1]


def test_a_silent_camera_gives_no_frame_counted_once_per_silence(capsys):
    cam = camera()
    now = time.monotonic_ns()
    assert cam.take(now) is None and cam.take(now) is None  # none yet: one silence
    cam.on_image(image())
    assert cam.take(time.monotonic_ns()) is not None
    later = time.monotonic_ns() + 150 * MS
    assert cam.take(later) is None and cam.take(later + MS) is None
    assert cam.counters["frame_silent"] == 2
    assert capsys.readouterr().err.count("frame_silent") == 1


def test_a_jpeg_is_decoded_and_another_format_or_garbage_is_refused():
    decode = jpeg_decoder()
    if decode is None:
        pytest.skip("Pillow is not installed")
    flat = np.full((4, 6, 3), (200, 100, 50), np.uint8)  # flat colours survive jpeg closely
    cam = camera(decode=decode)
    cam.on_compressed(jpeg(flat))
    frame, _ = cam.take(time.monotonic_ns())
    assert frame.shape == (4, 6, 3) and np.abs(frame.astype(int) - flat).max() <= 3
    png = jpeg(flat, fmt="png")
    garbage = jpeg(flat)
    garbage.data = array("B", b"\xff\xd8not a jpeg")
    for msg in (png, garbage, jpeg(np.zeros((5, 6, 3), np.uint8))):
        cam.on_compressed(msg)
    assert cam.counters["frame_bad"] == 3 and cam.counters["frames"] == 1
