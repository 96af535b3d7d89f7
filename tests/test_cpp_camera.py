"""A camera frame from the C++ client to a real inference node (issue 31): the example
controller (--camera overhead --frame-hw H,W) sends each `obs` with a uint8 [H, W, 3] frame
and its capture stamp, out of band as docs/wire.md section 5 describes; the node feeds it to
a tiny camera policy's graph (tests/cpp_camera_policy.py) and the controller follows the
chunk. A second controller whose frame is the wrong size is refused and counted by the node,
which serves on."""

from __future__ import annotations

import json
import sys
import time

import cpp_camera_policy as cp
import numpy as np
import pytest
import zmq
from cpp_client import build, controller_cmd, start, stop

from rtinfer.transport import wire
from rtinfer.transport.bus import Subscriber

H, W = 120, 200  # 72 000 bytes: over the 64 KiB from which a frame goes out of band


@pytest.fixture(scope="module")
def release():
    return build("release")


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    out = tmp_path_factory.mktemp("cpp_camera") / "policy"
    cp.build(out, H, W)
    return out


def camera_controller(release, policy, eps, robot: str, frame_hw: str):
    return start(
        controller_cmd(
            release,
            eps["act"],
            eps[robot],
            robot,
            extra=[
                "--action-spec",
                str(policy / "action_spec.json"),
                "--deadline-ms",
                "500",
                "--obs-hz",
                "10",
                "--camera",
                "overhead",
                "--frame-hw",
                frame_hw,
            ],
        )
    )


def test_cpp_camera_frame_is_fed_to_the_node_and_a_wrong_size_one_is_refused_and_counted(
    release, policy, tmp_path
):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("act", "cam", "camx")}
    node = start(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(policy),
            "--obs",
            eps["cam"],
            eps["camx"],
            "--actions",
            eps["act"],
            "--name",
            "policy",
            "--health-hz",
            "20",
            "--deadline-ms",
            "500",
            "--threads",
            "1",
        ]
    )
    cam = camera_controller(release, policy, eps, "cam", f"{H},{W}")
    camx = camera_controller(release, policy, eps, "camx", f"{H},{W + 1}")
    act = Subscriber(eps["act"], ["action_chunk", "health"])
    raw = zmq.Context.instance().socket(zmq.SUB)  # the obs as sent: its ZeroMQ frames
    raw.connect(eps["cam"])
    raw.subscribe(b"obs")
    chunks, health = {}, {}  # dest -> {cycle: [waypoint values]}; the node's last counters
    refused_at = None  # how many cycles of cam the node had answered when it first refused camx

    def served() -> int:
        return len(chunks.get("cam", ()))

    try:
        for proc in (node, cam, camx):
            line = proc.stdout.readline()
            assert "ready" in line, proc.stderr.read() if proc.poll() is not None else line
        assert raw.poll(10_000), "the C++ controller sent no obs"
        parts = raw.recv_multipart()
        end = time.monotonic() + 20
        while time.monotonic() < end and not (  # serving on after refusing
            refused_at is not None and served() >= refused_at + 5 and health["frame_bad"] >= 3
        ):
            env = act.recv(100)
            if env is None:
                continue
            if env.topic == "health":
                health = env.body["counters"]
                if refused_at is None and health["frame_bad"] >= 1:
                    refused_at = served()
            else:
                b = env.body
                chunks.setdefault(b["dest"], {}).setdefault(b["cycle"], []).append(b["values"])
    finally:
        outs = {name: stop(proc) for name, proc in (("cam", cam), ("camx", camx))}
        _, node_err = stop(node)
        act.close()
        raw.close(0)
    # on the wire: topic, envelope, then the pixels, out of band (docs/wire.md section 5)
    assert [len(p) for p in parts[::2]] == [3, H * W * 3]
    obs = wire.decode_frames(parts[1:])
    assert list(obs.body) == ["values", "ints", "frames"] and list(obs.body["frames"]) == [
        "overhead"
    ]
    frame = obs.body["frames"]["overhead"]
    assert list(frame) == ["image", "capture_ns"] and frame["capture_ns"] <= obs.stamps["capture"]
    assert np.array_equal(frame["image"], cp.synthetic_frame(H, W))
    # the node fed that frame to the graph, and answered the right-size robot only
    assert refused_at is not None and served() >= refused_at + 5, (refused_at, served(), health)
    assert set(chunks) == {"cam"}
    waypoints = np.array([v for cycle in chunks["cam"].values() for v in cycle])
    assert np.allclose(waypoints[:, :2], cp.expected(cp.synthetic_frame(H, W)), atol=1e-5)
    assert health["frame_bad"] >= 3 and health["obs_bad"] >= health["frame_bad"], health
    assert f"camera 'overhead' is uint8 [{H}, {W + 1}, 3]" in node_err
    assert "Traceback" not in node_err, node_err
    for name, (out, err) in outs.items():
        report = json.loads(out.strip().splitlines()[-1])["counters"]
        assert report["obs_sent"] >= 5 and report["rejected_hash"] == report["rejected_bad"] == 0
        assert (report["chunks_accepted"] >= 3) == (name == "cam"), (name, report, err)
