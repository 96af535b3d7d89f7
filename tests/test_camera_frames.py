"""Camera frames end to end: an image input in the observation spec, frames on the wire out
of band with their camera and capture stamp, read by the node as views of the received
message and fed to the graph; every bad frame refused, counted under its reason and said,
the loop serving on. The last test runs a real node process."""

import json
import subprocess
import sys
import time

import camera_policy as cp
import numpy as np
import pytest
import zmq

from rtinfer.inference.budget import Budget, BudgetLevel
from rtinfer.inference.robots import Robots
from rtinfer.model.obs_spec import FrameError, ObsSpec
from rtinfer.transport import wire
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import ArrayError, SchemaError, now_ns

MS = 1_000_000
rng = np.random.default_rng(0)


def frames(overhead, left, right, capture_ns):
    return {
        "overhead": {"image": overhead, "capture_ns": capture_ns},
        "left": {"image": left, "capture_ns": capture_ns},
        "right": {"image": right, "capture_ns": capture_ns},
    }


def good_body(capture_ns: int, value: int = 100) -> dict:
    return {
        "values": {"gantry": np.array([0.25, 0.0], np.float32)},
        "ints": {},
        "frames": frames(
            np.full((8, 8, 3), value, np.uint8),
            np.zeros((4, 4, 1), np.uint8),
            np.full((4, 4, 1), 255, np.uint8),
            capture_ns,
        ),
    }


# --- the observation spec ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "entry, says",
    [
        ({"dtype": "float32"}, 'dtype must be "uint8" for an image'),
        ({"shape": [8, 8]}, r"must be \[H, W, C\] for one camera"),
        ({"camera": ["a", "b"], "shape": [3, 8, 8, 3]}, "N = len.camera. for a stack"),
        ({"camera": ["a", "a"], "shape": [2, 8, 8, 3]}, "name each camera once"),
        ({"camera": "over head"}, "not a valid name"),
        ({"kind": "video"}, 'must be "array" or "image"'),
        ({"extra": 1}, "must have exactly"),
    ],
)
def test_an_image_input_that_cannot_be_fed_is_refused_naming_the_fix(entry, says):
    doc = json.loads(json.dumps(cp.OBS))
    doc["inputs"][0].update(entry)
    with pytest.raises(ValueError, match=says):
        ObsSpec(doc)


def test_a_camera_named_by_two_inputs_is_refused():
    doc = json.loads(json.dumps(cp.OBS))
    doc["inputs"][1]["camera"] = ["left", "overhead"]
    with pytest.raises(ValueError, match="name each camera once, in one input only"):
        ObsSpec(doc)


def test_a_frame_is_fed_as_a_view_of_the_received_message_and_a_stack_is_copied_once():
    spec = ObsSpec(cp.OBS)
    body = good_body(5)
    msg = wire.encode_frames("obs", body, seq=1, src="r", oob_bytes=0)
    received = [bytearray(f) for f in msg]  # as a zmq receive hands over its frames
    env = wire.decode_frames(received)
    feeds = spec.feeds(env.body)
    assert feeds["overhead"].shape == (1, 8, 8, 3) and feeds["wrists"].shape == (1, 2, 4, 4, 1)
    assert np.shares_memory(feeds["overhead"], np.frombuffer(received[-3], np.uint8))
    assert not feeds["overhead"].flags.writeable  # a view never writes back into a frame
    assert (feeds["wrists"][0, 0] == 0).all() and (feeds["wrists"][0, 1] == 255).all()
    assert spec.feeds(env.body)["wrists"] is feeds["wrists"]  # one buffer, allocated once


@pytest.mark.parametrize(
    "change, kind, says",
    [
        (
            lambda f: f["overhead"].update(image=np.zeros((8, 8, 4), np.uint8)),
            "frame_bad",
            r"camera 'overhead' is uint8 \[8, 8, 4\]; .* input 'overhead' wants uint8 \[8, 8, 3\]",
        ),
        (
            lambda f: f["right"].update(image=np.zeros((4, 5, 1), np.uint8)),
            "frame_bad",
            r"camera 'right' is uint8 \[4, 5, 1\]; .* input 'wrists' wants uint8 \[4, 4, 1\]",
        ),
        (lambda f: f.pop("left"), "frame_missing", r"lacks the frame of camera\(s\) \['left'\]"),
        (
            lambda f: f.update(wrist3=f["left"]),
            "frame_unknown",
            r"camera\(s\) \['wrist3'\], which the model's obs_spec.json does not name",
        ),
    ],
)
def test_a_frame_that_does_not_fit_is_refused_under_its_reason(change, kind, says):
    body = good_body(5)
    change(body["frames"])
    with pytest.raises(FrameError, match=says) as e:
        ObsSpec(cp.OBS).feeds(body)
    assert e.value.kind == kind


# --- the wire -----------------------------------------------------------------------------------
def test_a_camera_sized_frame_travels_out_of_band_with_its_camera_and_capture_stamp():
    image = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
    body = {"values": {}, "ints": {}, "frames": {"overhead": {"image": image, "capture_ns": 7}}}
    msg = wire.encode_frames("obs", body, seq=1, src="r")
    assert len(msg) == 2 and msg[1].nbytes == image.nbytes  # the envelope, then the pixels
    assert np.shares_memory(np.frombuffer(msg[1], np.uint8), image)  # no copy on the sender
    got = wire.decode_frames([bytes(f) for f in msg]).body["frames"]["overhead"]
    assert got["capture_ns"] == 7 and np.array_equal(got["image"], image)


@pytest.mark.parametrize(
    "frame, error, says",
    [
        ({"image": np.zeros((4, 4), np.uint8), "capture_ns": 1}, ArrayError, "must have 3"),
        ({"image": np.zeros((4, 4, 3), np.float32), "capture_ns": 1}, ArrayError, "must be uint8"),
        ({"image": np.zeros((0, 4, 3), np.uint8), "capture_ns": 1}, ArrayError, "is empty"),
        (
            {"image": np.zeros((4, 4, 3), np.uint8)},
            SchemaError,
            r"missing field\(s\) \['capture_ns'\]",
        ),
        ({"image": np.zeros((4, 4, 3), np.uint8), "capture_ns": -1}, SchemaError, "out of range"),
    ],
)
def test_a_frame_the_wire_cannot_carry_is_refused_by_the_sender_with_why(frame, error, says):
    with pytest.raises(error, match=says):
        wire.encode_frames(
            "obs", {"values": {}, "ints": {}, "frames": {"cam": frame}}, seq=1, src="r"
        )


def test_a_truncated_out_of_band_frame_is_refused_by_the_receiver():
    msg = [bytes(f) for f in wire.encode_frames("obs", good_body(5), seq=1, src="r", oob_bytes=0)]
    msg[2] = msg[2][:-1]  # [envelope, gantry, overhead, left, right]
    with pytest.raises(
        ArrayError, match="holds 191 bytes but dtype uint8 x shape .8, 8, 3. needs 192"
    ):
        wire.decode_frames(msg)


# --- the node's robots: a frame's own capture stamp ---------------------------------------------
def test_a_frame_older_than_the_deadline_or_from_the_future_is_refused_counted_and_said():
    said = []
    budget = Budget([BudgetLevel("full", 0, 2, 1.0)], 100 * MS)
    robots = Robots(
        budget,
        remote=False,
        period_ns=50 * MS,
        say=lambda k, t, **kw: said.append((k, t() if callable(t) else t)),
    )
    now = 10_000 * MS

    def env(seq, frame_capture):
        body = good_body(frame_capture)
        return wire.decode_frames(
            wire.encode_frames("obs", body, seq=seq, src="cam", stamps={"capture": now - MS})
        )

    assert robots.offer(env(1, now - 2 * MS), now, 100 * MS) is not None
    assert robots.offer(env(2, now - 101 * MS), now, 100 * MS) is None
    assert robots.offer(env(3, now + 5 * MS), now, 100 * MS) is None
    assert robots.counters["frame_stale"] == 1 and robots.counters["frame_future"] == 1
    assert (
        "frame capture of its camera 'overhead' is 101.0 ms old, past the 100 ms deadline"
        in said[0][1]
    )
    assert "ahead of its arrival" in said[1][1] and said[1][0] == "frame_future.cam"


# --- a real node process ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    out = tmp_path_factory.mktemp("camera") / "policy"
    cp.build(out)
    return out


def test_the_node_answers_frames_from_the_graph_and_counts_each_bad_frame_serving_on(
    policy, tmp_path
):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("robot", "bad", "raw", "act")}
    robot = Publisher(eps["robot"], "robot", bind=True)
    bad = Publisher(eps["bad"], "badcam", bind=True)
    raw = zmq.Context.instance().socket(zmq.PUB)  # truncated frames: what no Publisher sends
    raw.bind(eps["raw"])
    act = Subscriber(eps["act"], ["action_chunk", "health"])
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(policy),
            "--obs",
            eps["robot"],
            eps["bad"],
            eps["raw"],
            "--actions",
            eps["act"],
            "--name",
            "policy",
            "--health-hz",
            "20",
            "--seconds",
            "60",
            "--deadline-ms",
            "2000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert "ready" in node.stdout.readline()
        answered, published = {}, []

        def ask(value: int) -> int:
            """One good observation (overhead pixels = value), answered: its seq. Until the
            first is answered (the slow joiner) each waits 50 ms; later ones up to 20 s."""
            for _ in range(400):
                seq = robot._seq
                published.append(seq)
                robot.publish("obs", good_body(now_ns(), value), {"capture": now_ns()})
                end = time.monotonic() + (20 if answered else 0.05)
                while seq not in answered and time.monotonic() < end:
                    env = act.recv(20)
                    if env is not None and env.topic == "action_chunk":
                        answered.setdefault(env.body["cycle"], []).append(env.body["values"])
                if seq in answered:
                    return seq
            pytest.fail("the node never answered")

        first = ask(51)
        want = cp.expected(np.full((8, 8, 3), 51), np.zeros(16), np.full(16, 255), [0.25])
        assert np.allclose(answered[first][0], want, atol=1e-6)  # what the graph was fed

        def health() -> dict:
            """The node's next counters; waypoints that come meanwhile are kept."""
            after, end = now_ns(), time.monotonic() + 10
            while time.monotonic() < end:
                env = act.recv(100)
                if env is not None and env.topic == "action_chunk":
                    answered.setdefault(env.body["cycle"], []).append(env.body["values"])
                elif env is not None and env.stamps.get("publish", 0) > after:
                    return env.body["counters"]
            pytest.fail("no health from the node")

        def truncated(seq: int) -> None:
            parts = wire.encode_frames(
                "obs",
                good_body(now_ns()),
                seq=seq,
                src="badcam",
                stamps={"capture": now_ns()},
                oob_bytes=0,
            )
            raw.send_multipart([b"obs", *parts[:-1], bytes(parts[-1])[:-7]])

        shape = good_body(now_ns())
        shape["frames"]["overhead"]["image"] = np.zeros((8, 8, 1), np.uint8)
        unknown = good_body(now_ns())
        unknown["frames"]["rear"] = unknown["frames"]["left"]
        missing = good_body(now_ns())
        del missing["frames"]["right"]
        # The robot's endpoint is joined (answered); the other two may not be yet (a PUB
        # drops what it sends before a subscriber has joined): send one of each until the
        # node counts it, then take the settled counts as the base of what follows.
        for kind, send in (
            ("frame_bad", lambda: bad.publish("obs", shape, {"capture": now_ns()})),
            ("obs_rejected", lambda: truncated(99)),
        ):
            for _ in range(100):
                send()
                if health()[kind] >= 1:
                    break
            else:
                pytest.fail(f"the node never counted a {kind}")
        ask(55)  # what was in flight has arrived
        base = health()
        published.clear()
        first = max(answered)
        sent = {
            "frame_bad": 3,
            "frame_unknown": 2,
            "frame_missing": 2,
            "frame_stale": 2,
            "truncated": 3,
        }

        def counted(kind: str, want: int) -> None:
            """The node counted `want` of `kind` since base: the badcam observation was taken
            before the next one is sent (two sockets keep no order between them: the robot's
            answer does not say badcam's arrived, and a later one would supersede it)."""
            end = time.monotonic() + 20
            while health()[kind] - base[kind] < want:
                if time.monotonic() > end:
                    pytest.fail(f"the node never counted {want} {kind}")

        for i in range(3):
            bad.publish("obs", shape, {"capture": now_ns()})
            truncated(100 + i)
            ask(60 + i)
            counted("frame_bad", i + 1)
            if i < 2:
                bad.publish("obs", unknown, {"capture": now_ns()})
                ask(70 + i)
                counted("frame_unknown", i + 1)
                bad.publish("obs", missing, {"capture": now_ns()})
                ask(80 + i)
                counted("frame_missing", i + 1)
                bad.publish("obs", good_body(now_ns() - 3_000 * MS), {"capture": now_ns()})
                ask(90 + i)
        good = ask(200)
        end = time.monotonic() + 10
        while len(answered[good]) < cp.ACTION.horizon and time.monotonic() < end:
            env = act.recv(20)  # the last chunk's later waypoints
            if env is not None and env.topic == "action_chunk":
                answered[env.body["cycle"]].append(env.body["values"])
        assert np.allclose(answered[good][0][0], 200 / 255, atol=1e-6)
        c = health()
        for kind in ("frame_bad", "frame_unknown", "frame_missing", "frame_stale"):
            assert c[kind] - base[kind] == sent[kind], (kind, c, base)
        assert (
            c["obs_bad"] - base["obs_bad"]
            == sent["frame_bad"] + sent["frame_unknown"] + sent["frame_missing"]
        )
        assert c["obs_rejected"] - base["obs_rejected"] == sent["truncated"]
        after = [seq for seq in published if seq > first]
        assert sorted(s for s in answered if s > first) == after and len(after) == 10  # none lost
        assert c["robot.badcam.cycles"] == 0 and c["robot.robot.cycles"] >= len(answered)
        assert all(len(v) == cp.ACTION.horizon for v in answered.values())  # whole chunks
    finally:
        node.terminate()
        _, err = node.communicate(timeout=30)
        for s in (robot, bad, act):
            s.close()
        raw.close(0)
    lines = err.splitlines()
    for says in (
        "camera 'overhead' is uint8 [8, 8, 1]",
        "camera(s) ['rear']",
        "lacks the frame of camera(s) ['right']",
        "camera 'overhead' is 3",
        "holds 9 bytes but dtype uint8 x shape (4, 4, 1) needs 16",
    ):
        assert sum(says in line for line in lines) >= 1, (says, err)
    assert "Traceback" not in err


def test_docs_wire_example_of_three_frames_is_what_the_encoder_sends():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "wire.md").read_text()
    body = {
        "values": {},
        "ints": {},
        "frames": {
            "overhead": {"image": np.zeros((224, 224, 3), np.uint8), "capture_ns": 1000},
            "left": {"image": np.zeros((48, 64, 3), np.uint8), "capture_ns": 998},
            "right": {"image": np.zeros((48, 64, 3), np.uint8), "capture_ns": 999},
        },
    }
    msg = wire.encode_frames("obs", body, seq=1, src="r")
    assert [len(f) if isinstance(f, bytes) else f.nbytes for f in msg][1:] == [150_528]
    env = bytes(msg[0])
    # overhead: ext 2, payload 16 + 8 * 3 = 40 bytes (ext8); left, right: ext 1, payload
    # 8 + 8 * 3 + 9216 = 9248 bytes (ext16), header code 5 (uint8), ndim 3
    assert env.count(b"\xc7\x28\x02\x05\x03") == 1 and env.count(b"\xc8\x24\x20\x01\x05\x03") == 2
    assert "150 528 pixel bytes" in text and "dims 48 64 3, 9216 bytes" in text
    decoded = wire.decode_frames([bytes(f) for f in msg]).body["frames"]
    assert {k: (v["image"].shape, v["capture_ns"]) for k, v in decoded.items()} == {
        "overhead": ((224, 224, 3), 1000),
        "left": ((48, 64, 3), 998),
        "right": ((48, 64, 3), 999),
    }


def test_an_action_token_policy_refuses_frames_as_from_a_camera_it_does_not_know():
    from types import SimpleNamespace

    from rtinfer.inference.policy import TokenPolicy

    policy = SimpleNamespace(model=None)  # encode refuses before it reads the model
    says = r"camera\(s\) \['left', 'overhead', 'right'\]: an action-token policy takes no frames"
    with pytest.raises(FrameError, match=says) as e:
        TokenPolicy.encode(policy, good_body(5))
    assert e.value.kind == "frame_unknown"


def test_the_robot_refuses_frames_for_an_action_token_policy_before_sending():
    from pathlib import Path

    from controllers.node import ObsCheck, obs_spec_from

    root = Path(__file__).resolve().parents[1]
    tokens = obs_spec_from(
        json.loads((root / "models/zoo/conveyor-v1-draft/obs_tokens.json").read_text())
    )
    assert "an action-token policy takes no camera frames" in ObsCheck(tokens).problem(good_body(5))
    assert ObsCheck(ObsSpec(cp.OBS)).problem(good_body(5)) is None
