"""`rtinfer demo --policy DIR` with a camera policy: launch/conveyor_vision.yaml, the camera
process as a launch node (started before the sim, stopped after it, scheduled below the
loop and the policy), a tiny real ONNX camera policy served end to end, and the camera's
figures in the report."""

import json
import subprocess
import sys
from pathlib import Path

import conveyor_vision_policy as vision
import pytest

from rtinfer.cli.shipped import launch_file
from rtinfer.launch.file import load

pytest.importorskip("onnxruntime")

RTINFER = [sys.executable, "-m", "rtinfer.cli"]


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    return vision.build(tmp_path_factory.mktemp("vision") / "stub", size=64)


@pytest.mark.slow  # 5-11 s on 2 cores (a whole launch): `make test-slow` runs it
@pytest.mark.timeout(240)
def test_the_demo_serves_a_camera_policy_from_the_camera_process(stub, tmp_path):
    out = subprocess.run(
        [
            *RTINFER,
            "demo",
            "--policy",
            str(stub),
            "--seconds",
            "3",
            "--camera-hz",
            "20",
            "--json",
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    cam, pol, ctl = r["camera"], r["policy"], r["controller"]
    assert cam["camera"] == "overhead" and cam["shape"] == [64, 64, 3] and cam["hz"] == 20
    assert cam["rendered"] > 0 and cam["frames_sent"] > 0
    assert cam["frames_bad"] == 0 and cam["skipped_no_frame"] >= 0
    assert 0 <= cam["frame_age_ms"]["p50"] <= cam["frame_age_ms"]["p99"] <= r["deadline_ms"]
    # the node took every observation's frame: cycles served, none refused for its frames
    assert pol["cycles"] > 0 and ctl["chunks_accepted"] > 0
    assert {
        k: pol[k] for k in ("frame_bad", "frame_missing", "frame_unknown", "obs_bad")
    } == dict.fromkeys(("frame_bad", "frame_missing", "frame_unknown", "obs_bad"), 0)
    # every observation the sim offered carried its frame
    assert ctl["obs_sent"] + ctl["obs_dropped"] == cam["frames_sent"] and ctl["obs_bad"] == 0
    run = Path(r["run_dir"])
    # the camera is scheduled below the loop and the policy, never above them
    assert {"camera", "sim", "policy"} <= set(r["scheduling"])
    prio = {n.name: n.priority for n in load(launch_file("conveyor_vision.yaml")).nodes}
    assert prio["monitor"] is None and 0 < prio["camera"] < prio["policy"] < prio["sim"]
    log = (run / "launch.log").read_text().splitlines()
    order = [
        next(i for i, ln in enumerate(log) if ln.startswith(what))
        for what in ("started 'camera'", "started 'sim'", "node 'sim' finished", "stopped 'camera'")
    ]
    assert order == sorted(order), log


def test_camera_options_are_refused_before_anything_starts(stub, tmp_path):
    out = subprocess.run(
        [
            *RTINFER,
            "demo",
            "--policy",
            "models/zoo/conveyor-act",
            "--camera-hz",
            "15",
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--camera-hz 15: this policy takes no camera frames" in out.stderr
    out = subprocess.run(
        [*RTINFER, "demo", "--policy", str(stub), "--robots", "2", "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--robots 2 with a camera policy" in out.stderr
    assert not any(tmp_path.iterdir())  # nothing ran
