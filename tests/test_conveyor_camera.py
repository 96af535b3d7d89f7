"""The conveyor cell's overhead camera, as real processes: a free-running cell publishes its
state at 1 kHz-loop pace through a StateTap, the camera process renders it with MuJoCo (EGL)
and publishes latest-only frames; this test is the policy side's subscriber."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from examples.conveyor_sorting.camera import CameraConfig, frame_topic
from rtinfer.transport.bus import Subscriber
from rtinfer.transport.wire import now_ns

CAMERA = [sys.executable, "-m", "examples.conveyor_sorting.camera"]
SIZE = 96


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*CAMERA, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )


def _stop(proc: subprocess.Popen) -> dict:
    """SIGTERM, then the one-line JSON report it prints."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def _next(sub: Subscriber, within_s: float):
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        env = sub.recv(timeout_ms=100)
        if env is not None:
            return env
    raise AssertionError(f"no frame within {within_s} s: {sub.counters}")


@pytest.mark.timeout(120)
def test_frames_follow_the_cell_arrive_latest_only_and_never_hold_up_their_senders(tmp_path):
    state, frames = f"ipc://{tmp_path}/state", f"ipc://{tmp_path}/frames"
    cell = _spawn("--free-cell", "--state", state, "--state-hz", "30", "--seconds", "60")
    cam = _spawn(
        "--state",
        state,
        "--frames",
        frames,
        "--hz",
        "20",
        "--width",
        str(SIZE),
        "--height",
        str(SIZE),
        "--seconds",
        "60",
    )
    sub = Subscriber(frames, [frame_topic("overhead")], latest_only=True, hwm=2)
    try:
        # 1. frames arrive, shaped and stamped as documented, and they change with the scene
        got = [_next(sub, 60)]  # the first one waits for both processes to start
        while len(got) < 12:
            got.append(_next(sub, 10))
        for env in got:
            frame = env.body["values"]["overhead"]
            assert frame.shape == (SIZE, SIZE, 3) and frame.dtype == np.uint8
            assert env.src == "overhead" and env.topic == "obs/camera/overhead"
            assert env.stamps["capture"] <= env.stamps["render"] <= env.stamps["recv"]
        captures = [e.stamps["capture"] for e in got]
        assert captures == sorted(set(captures))  # each frame a newer state than the last
        seqs = [e.body["ints"]["state_seq"] for e in got]
        assert seqs == sorted(set(seqs))
        assert len({e.body["values"]["overhead"].tobytes() for e in got}) >= 2  # objects ride
        # 2. a consumer that stops reading holds up nobody: the camera kept rendering the
        # cell's newer states, and what waited for the consumer is bounded (a few frames)
        last = got[-1]
        paused = now_ns()
        time.sleep(2.0)
        stale = 0
        env = _next(sub, 10)
        while env.stamps["capture"] < paused + 1_000_000_000:
            stale += 1
            env = _next(sub, 10)
        assert env.body["ints"]["state_seq"] - last.body["ints"]["state_seq"] >= 10
        assert stale + sub.counters["superseded"] <= 12, (stale, sub.counters)
        # 3. a camera that stalls (SIGSTOP) holds up neither the cell nor its own publisher:
        # the cell's states went on (its seq and clock), and frames resume after SIGCONT
        before = _next(sub, 10)
        cam.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        cam.send_signal(signal.SIGCONT)
        continued, stale = now_ns(), 0
        after = _next(sub, 10)
        while after.stamps["capture"] < continued - 200_000_000:  # a state from the stall
            stale += 1
            after = _next(sub, 10)
        assert stale <= 12, stale
        assert after.stamps["capture"] - before.stamps["capture"] >= 1_200_000_000
        assert after.body["ints"]["state_seq"] - before.body["ints"]["state_seq"] >= 15
    finally:
        sub.close()
        cam_report, cell_report = _stop(cam), _stop(cell)
    assert cam_report["state_bad"] == 0 and cam_report["shape"] == [SIZE, SIZE, 3]
    assert cam_report["frames"] >= len(got) and cam_report["frames"] <= cam_report["states"]
    assert cell_report["states_sent"] >= cam_report["states"] and cell_report["spawned"] >= 1


def test_the_command_line_says_what_is_missing_and_refuses_an_unknown_camera(tmp_path):
    out = subprocess.run(
        [*CAMERA, "--frames", "ipc:///tmp/x"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "--state is required" in out.stderr
    out = subprocess.run(
        [
            *CAMERA,
            "--state",
            f"ipc://{tmp_path}/s",
            "--frames",
            f"ipc://{tmp_path}/f",
            "--camera",
            "wrist",
            "--seconds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    assert out.returncode == 2 and "no camera 'wrist'" in out.stderr
    with pytest.raises(ValueError, match="offscreen buffer"):
        CameraConfig(state="ipc:///tmp/s", frames="ipc:///tmp/f", width=1024)


def test_a_frame_is_a_function_of_the_state_alone():
    code = """
import json
import numpy as np
from examples.conveyor_sorting.camera import CellMirror
from examples.conveyor_sorting.cell import ConveyorCell
cell = ConveyorCell()
cell.step(500)
mirror = CellMirror("overhead", 64, 48)
q = cell.data.qpos.copy()
a, b = mirror.render(q), mirror.render(q)
q[0] += 0.3  # the gantry moves 30 cm along the belt
c = mirror.render(q)
print(json.dumps({"shape": list(a.shape), "same": bool(np.array_equal(a, b)),
                  "moved": int((c != a).any(axis=2).sum()), "a_is_b": a is b}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    r = json.loads(out.stdout)
    assert r["shape"] == [48, 64, 3] and r["same"] and not r["a_is_b"]
    assert r["moved"] >= 20  # pixels that changed where the gantry left and arrived
