"""Runs recorded as MCAP (rtinfer.record): the demo's recording, read back with
mcap-ros2-support's own decoder (independent of the writer), holds every cycle the robot
traced, and `rtinfer report run.mcap` gives the trace file's table; bad --record paths are
refused before anything starts."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("mcap_ros2")


def rtinfer(*args, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    r = rtinfer(
        "demo", "--seconds", 3, "--json", "--run-dir", d / "run", "--record", d / "run.mcap"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return d, json.loads(r.stdout)


def test_the_recording_opens_with_ros2_schemas_and_holds_every_traced_cycle(recorded):
    from mcap_ros2.reader import read_ros2_messages

    from rtinfer.realtime.trace import read_trace

    d, report = recorded
    assert report["recording"] == str(d / "run.mcap")
    kinds, traces, obs, nodes, answered = Counter(), [], [], set(), set()
    for msg in read_ros2_messages(str(d / "run.mcap")):
        kinds[(msg.channel.topic.rsplit("/", 1)[0], msg.schema.name)] += 1
        m = msg.ros_msg
        if msg.schema.name == "rtinfer_msgs/msg/CycleTrace":
            traces.append(m.cycle)
            answered.add((m.header.stamp.sec, m.header.stamp.nanosec))  # its capture
            assert m.late or abs(m.e2e_ms - m.field_values[m.field_names.index("e2e_ms")]) < 1e-6
        elif msg.schema.name == "rtinfer_msgs/msg/Observation":
            obs.append((m.header.stamp.sec, m.header.stamp.nanosec))
            assert {a.name for a in m.values} >= {"gantry"} and m.header.frame_id == "sim"
        elif msg.schema.name == "diagnostic_msgs/msg/DiagnosticArray":
            nodes |= {s.name for s in m.status}
    assert ("/rtinfer/waypoints", "rtinfer_msgs/msg/Waypoint") in kinds
    assert ("/rtinfer/obs", "rtinfer_msgs/msg/Observation") in kinds
    assert {"policy", "monitor", "controller"} <= nodes, nodes
    # nothing lost: every cycle the robot traced, and every observation that was answered
    # (the recording starts once its connection is up: the sim's first observations, while
    # the world waits for the policy's first chunk, may come before; docs/ros2.md)
    file_cycles = [r["cycle"] for r in read_trace(d / "run" / "nominal" / "controller.trace")]
    assert sorted(traces) == sorted(file_cycles) and len(traces) >= 20
    assert answered <= set(obs) and len(obs) <= report["controller"]["obs_sent"]


def test_report_reads_a_recording_as_it_reads_the_trace_file(recorded):
    d, _ = recorded
    from_mcap = rtinfer("report", d / "run.mcap")
    from_trace = rtinfer("report", d / "run" / "nominal" / "controller.trace")
    assert from_mcap.returncode == from_trace.returncode == 0, from_mcap.stdout
    rows = lambda out: [ln for ln in out.splitlines() if ln.startswith("│ ")]  # noqa: E731
    assert rows(from_mcap.stdout) == rows(from_trace.stdout) and rows(from_mcap.stdout)


def test_bad_record_paths_are_refused_with_one_line_before_anything_starts(tmp_path):
    (tmp_path / "a-file").write_text("")  # no folder can be made under a file
    for args, says in (
        ((tmp_path / "a-file" / "dir" / "run.mcap",), "cannot write there"),
        ((tmp_path / "run.txt",), "name an .mcap file"),
        ((tmp_path / "run.mcap", "--stress", "cpu"), "records one run"),
    ):
        r = rtinfer("demo", "--seconds", 2, "--run-dir", tmp_path / "rd", "--record", *args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and r.stdout == "" and len(lines) == 1, r.stderr[-2000:]
        assert says in lines[0], lines
    r = rtinfer("launch", "launch/conveyor_expert.yaml", "--record", tmp_path / "x.txt")
    assert r.returncode == 2 and "name an .mcap file" in r.stderr
    r = rtinfer("report", tmp_path / "none.mcap")
    assert r.returncode == 2 and "cannot read" in r.stdout


def test_the_reading_example_of_docs_ros2_runs_as_written(recorded, tmp_path):
    import re
    import shutil

    d, _ = recorded
    text = (ROOT / "docs" / "ros2.md").read_text()
    code = dict(re.findall(r"<!-- ros2-example: (\S+) -->\s*```\w*\n(.*?)```", text, re.S))
    assert list(code) == ["read_run.py"]
    shutil.copy(d / "run.mcap", tmp_path / "run.mcap")
    r = subprocess.run(
        [sys.executable, "-c", code["read_run.py"]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.fullmatch(
        r"(\d+) cycles applied, (\d+) late, e2e p50 [\d.]+ ms; nodes: (.*)\n", r.stdout
    )
    assert m and int(m[1]) >= 20, r.stdout
    assert {"controller", "monitor", "policy"} <= set(m[3].split(", ")), r.stdout


def test_camera_frames_are_recorded_as_sensor_msgs_images(tmp_path):
    import time

    import numpy as np
    from mcap_ros2.reader import read_ros2_messages

    from rtinfer.record.node import Recorder
    from rtinfer.transport.bus import Publisher
    from rtinfer.transport.wire import now_ns

    ep = f"ipc://{tmp_path}/obs"
    pub = Publisher(ep, "cell")
    rec = Recorder([ep], str(tmp_path / "cam.mcap"))
    image = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    try:
        body = {
            "values": {"xy": np.zeros(2, np.float32)},
            "ints": {},
            "frames": {"overhead": {"image": image, "capture_ns": now_ns() - 1000}},
        }
        end = time.monotonic() + 30
        while rec.counters["images"] < 3 and time.monotonic() < end:  # joined: then 3 more
            pub.publish("obs", body, {"capture": now_ns()})
            rec.spin_once(50)
    finally:
        rec.close()
        pub.close()
    images = [
        m
        for m in read_ros2_messages(str(tmp_path / "cam.mcap"))
        if m.channel.topic == "/rtinfer/camera/cell/overhead"
    ]
    assert len(images) == rec.counters["images"] >= 3
    img = images[-1].ros_msg
    assert (img.height, img.width, img.encoding, img.step) == (48, 64, "rgb8", 64 * 3)
    assert np.array_equal(np.frombuffer(bytes(img.data), np.uint8).reshape(48, 64, 3), image)
    assert images[-1].schema.name == "sensor_msgs/msg/Image"
