"""What a camera robot's author hears from a real policy node: a frame older than the deadline
is refused with a fix (as one from the future is), in a line without a doubled quote."""

import signal
import subprocess
import sys
import time

import camera_policy as cp
import numpy as np
import pytest

from rtinfer.transport.bus import Publisher
from rtinfer.transport.wire import now_ns

MS = 1_000_000


def body(frame_capture_ns: int) -> dict:
    def frame(shape, v):
        return {
            "image": np.full(shape, v, np.uint8),  # noqa: E731
            "capture_ns": frame_capture_ns,
        }

    return {
        "values": {"gantry": np.array([0.25, 0.0], np.float32)},
        "ints": {},
        "frames": {
            "overhead": frame((8, 8, 3), 100),
            "left": frame((4, 4, 1), 0),
            "right": frame((4, 4, 1), 255),
        },
    }


def test_a_stale_frame_is_refused_with_its_fix_and_a_future_one_too(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    cp.build(tmp_path / "policy")
    robot = Publisher(f"ipc://{tmp_path}/robot", "cam", bind=True)
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(tmp_path / "policy"),
            "--obs",
            f"ipc://{tmp_path}/robot",
            "--actions",
            f"ipc://{tmp_path}/act",
            "--name",
            "policy",
            "--seconds",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert "ready" in node.stdout.readline()
        for _ in range(40):  # past the slow joiner: one of each, every 50 ms
            now = now_ns()
            robot.publish("obs", body(now - 5_000 * MS), {"capture": now})
            robot.publish("obs", body(now + 5_000 * MS), {"capture": now})
            time.sleep(0.05)
    finally:
        node.send_signal(signal.SIGINT)
        err = node.communicate(timeout=30)[1]
        robot.close()
    stale = [ln for ln in err.splitlines() if "(frame_stale)" in ln]
    future = [ln for ln in err.splitlines() if "(frame_future)" in ln]
    assert stale and future, err
    assert "''s" not in stale[0] + future[0], stale[0]
    age_ms = float(stale[0].split(" ms old")[0].rsplit(" ", 1)[1])
    assert "camera 'overhead'" in stale[0] and 5000 <= age_ms < 6000, stale[0]
    assert "stamp" in stale[0].split("deadline", 1)[1] and "clock" in stale[0], stale[0]
    assert "fix the robot's clock or stamps" in future[0]
