"""The conveyor sim as a camera driver (examples/conveyor_sorting/camera_driver.py): with a
camera policy its observations carry the camera process's newest frame, stamped with the
frame's own capture, and only the vector inputs the policy names. Real processes: the camera
(MuJoCo, EGL), the sim (controllers.run) and the policy (a real ONNX graph on the inference
node); this test listens on the sim's obs endpoint as a second policy would."""

import json
import os
import subprocess
import sys
import time

import conveyor_vision_policy as vision
import numpy as np
import pytest

from examples.conveyor_sorting.camera import frame_topic
from examples.conveyor_sorting.camera_driver import CellCamera
from examples.conveyor_sorting.sim_node import policy_inputs
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

pytest.importorskip("onnxruntime")

DEADLINE_NS = 100_000_000
SIZE = 64  # the stub policy's frame: small, so the camera renders fast on a busy host
PY = [sys.executable, "-m"]


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    return vision.build(tmp_path_factory.mktemp("vision") / "stub", size=SIZE)


def _spawn(args: list[str], log) -> subprocess.Popen:
    return subprocess.Popen(
        [*PY, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )


@pytest.mark.timeout(180)
def test_observations_carry_the_newest_frame_its_own_stamp_and_no_objects(stub, tmp_path):
    ep = {k: f"ipc://{tmp_path}/{k}" for k in ("obs", "actions", "state", "frames")}
    listener = Subscriber(ep["obs"], ["obs"])
    with open(tmp_path / "procs.log", "w") as log:
        camera = _spawn(
            [
                "examples.conveyor_sorting.camera",
                "--state",
                ep["state"],
                "--frames",
                ep["frames"],
                "--policy",
                str(stub),
                "--hz",
                "30",
                "--report",
                str(tmp_path / "camera.json"),
            ],
            log,
        )
        sim = _spawn(
            [
                "controllers.run",
                "--hardware",
                "examples.conveyor_sorting.sim_node:ConveyorSim",
                "--config",
                "examples.conveyor_sorting:robot.yaml",
                "--model",
                str(stub),
                "--obs",
                ep["obs"],
                "--actions",
                ep["actions"],
                "--report",
                str(tmp_path / "sim.json"),
                "--set",
                "seconds=3",
                "--set",
                f"policy={stub}",
                "--set",
                f"camera_state={ep['state']}",
                "--set",
                f"camera_frames={ep['frames']}",
            ],
            log,
        )
        policy = _spawn(
            [
                "rtinfer.inference.node",
                "--model",
                str(stub),
                "--obs",
                ep["obs"],
                "--actions",
                ep["actions"],
                "--threads",
                "1",
                "--name",
                "policy",
            ],
            log,
        )
        seen = []
        try:
            end = time.monotonic() + 150
            while sim.poll() is None and time.monotonic() < end:
                env = listener.recv(timeout_ms=100)
                if env is not None:
                    seen.append(env)
            assert sim.wait(timeout=30) == 0, (tmp_path / "procs.log").read_text()[-3000:]
        finally:
            for p in (policy, camera, sim):
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=30)
            listener.close()
    assert len(seen) >= 10, len(seen)
    for env in seen:
        body, capture = env.body, env.stamps["capture"]
        assert set(body["values"]) == {"gantry", "instruction"}  # never the true `objects`
        assert not body["ints"]
        frame = body["frames"]["overhead"]
        assert frame["image"].shape == (SIZE, SIZE, 3) and frame["image"].dtype == np.uint8
        assert capture - DEADLINE_NS <= frame["capture_ns"] <= capture  # its own, in time
    # the frames are the camera's renders of the cell's states, not one picture repeated
    assert len({env.body["frames"]["overhead"]["capture_ns"] for env in seen}) >= len(seen) // 2
    sim_report = json.loads((tmp_path / "sim.json").read_text())
    cam = sim_report["camera"]
    c = sim_report["controller"]
    assert cam["sent"] == c["obs_sent"] + c["obs_dropped"] and c["obs_sent"] >= len(seen)
    assert cam["bad"] == 0 and cam["received"] >= 1 and cam["states_sent"] >= cam["received"]
    assert sim_report["controller"]["obs_bad"] == 0
    assert sim_report["controller"]["chunks_accepted"] > 0  # the policy answered from frames
    assert 0 <= cam["frame_age_ms"]["max"] <= DEADLINE_NS / 1e6
    rendered = json.loads((tmp_path / "camera.json").read_text())
    assert rendered["shape"] == [SIZE, SIZE, 3]  # from the policy's obs_spec.json
    assert rendered["frames"] >= cam["received"] and rendered["state_bad"] == 0


def test_no_frame_a_stale_frame_and_a_wrong_size_are_each_skipped_and_counted(tmp_path, capfd):
    frames = f"ipc://{tmp_path}/frames"
    deadline_ns = 1_000_000_000  # long: this test's sleeps must not make a frame stale
    cam = CellCamera(
        "overhead", (8, 8, 3), f"ipc://{tmp_path}/state", frames, hz=30, deadline_ns=deadline_ns
    )
    pub = Publisher(frames, "overhead")
    try:
        assert cam.frame(now_ns()) is None  # the camera has not started: nothing to send

        def send(image, capture_ns):
            pub.publish(
                frame_topic("overhead"),
                {"values": {"overhead": image}, "ints": {}},
                {"capture": capture_ns},
            )

        image = np.full((8, 8, 3), 7, np.uint8)
        end = time.monotonic() + 20
        while cam.counters["received"] == 0 and time.monotonic() < end:  # the slow joiner
            send(image, now_ns())
            time.sleep(0.02)
            got = cam.frame(now_ns())
        assert got is not None and got[0] is not image and np.array_equal(got[0], image)
        assert got[1] <= now_ns()
        send(np.zeros((16, 16, 3), np.uint8), now_ns())  # another size: refused, said
        time.sleep(0.2)
        later = cam.frame(now_ns())
        assert later is not None and later[1] == got[1]  # the last good frame still stands
        send(image, now_ns() - 2 * deadline_ns)  # a frame from a camera that stalled
        time.sleep(0.2)
        assert cam.frame(now_ns()) is None
    finally:
        pub.close()
        cam.close()
    c = cam.counters
    assert c["no_frame"] >= 1 and c["bad"] == 1 and c["stale"] == 1 and c["sent"] >= 2, c
    err = capfd.readouterr().err
    assert "sent a frame of uint8 (16, 16, 3); the policy takes uint8 [8, 8, 3]" in err


def test_the_policy_spec_chooses_what_the_sim_sends(stub, tmp_path):
    keys, camera = policy_inputs(str(stub))
    assert keys == ["gantry", "instruction"] and camera == ("overhead", (SIZE, SIZE, 3))
    assert policy_inputs("models/zoo/conveyor-act") == (
        ["objects", "gantry", "held", "instruction"],
        None,
    )
    assert policy_inputs("models/zoo/conveyor-v1") == (None, None)  # tokens: all, as before
    assert policy_inputs(None) == (None, None)
    spec = json.loads((stub / "obs_spec.json").read_text())
    spec["inputs"].append({"key": "depth", "dtype": "float32", "shape": [4]})
    (tmp_path / "obs_spec.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"takes inputs this cell does not observe \(\['depth'\]"):
        policy_inputs(str(tmp_path))


def test_a_camera_policy_without_the_camera_endpoints_is_one_line_and_exit_2(stub, tmp_path):
    out = subprocess.run(
        [
            *PY,
            "controllers.run",
            "--hardware",
            "examples.conveyor_sorting.sim_node:ConveyorSim",
            "--config",
            "examples.conveyor_sorting:robot.yaml",
            "--model",
            str(stub),
            "--obs",
            f"ipc://{tmp_path}/obs",
            "--actions",
            f"ipc://{tmp_path}/a",
            "--set",
            f"policy={stub}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "takes frames of camera 'overhead': give --set camera_state=ENDPOINT" in out.stderr
    assert "Traceback" not in out.stderr
