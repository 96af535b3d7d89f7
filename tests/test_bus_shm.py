"""The bus over shm:// (iceoryx2 shared memory), publisher and subscriber in separate processes:
the same messages byte for byte, a late subscriber, bad samples refused and counted while good
ones pass, ZeroMQ and shm endpoints in one Subscriber, and the line an install without
iceoryx2 gets. Orderings and counts only: no timing is asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from test_bus import recv_n

from rtinfer.transport.bus import EndpointInUse, Publisher, Subscriber
from rtinfer.transport.bus.shm import HELD, QUEUE

pytest.importorskip("iceoryx2")  # the dev install has it (Makefile: the shm extra)

# A child that publishes `obs` messages whose content follows from seq: a 224x224x3 frame
# (out of band), a small float array (inline) and the seq. argv: endpoint, count, then
# "wait" (publish the next once a line arrives on stdin) or "go" (all at once); it closes
# once stdin does.
PUBLISHER = textwrap.dedent("""
    import sys
    import numpy as np
    from rtinfer.transport.bus import Publisher

    def body(seq):
        frame = np.random.default_rng(seq).integers(0, 256, (224, 224, 3), dtype=np.uint8)
        return {"values": {"overhead": frame, "gantry": np.arange(3.0) + seq}, "ints": {"seq": seq}}

    pub = Publisher(sys.argv[1], "camera", oob_bytes=1024)
    print("up", flush=True)
    for seq in range(int(sys.argv[2])):
        if sys.argv[3] == "wait" and not sys.stdin.readline():
            break
        ok = pub.publish("obs", body(seq), {"capture": 1000 + seq})
        print("sent", seq, ok, flush=True)
    print("counters", pub.counters, flush=True)
    sys.stdin.read()  # a closing publisher takes back what was not received: close at EOF
    pub.close()
""")


def expected(seq: int) -> dict:
    frame = np.random.default_rng(seq).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    return {"overhead": frame, "gantry": np.arange(3.0) + seq}


def endpoint(name: str) -> str:
    return f"shm://test/{os.getpid()}/{name}"  # a run of its own: services are host-wide


def publisher(ep: str, count: int, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, ep, str(count), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_messages_arrive_byte_exact_with_their_array_frames():
    ep = endpoint("exact")
    with Subscriber(ep, ["obs"]) as sub:
        child = publisher(ep, QUEUE, "go")  # no more than the queue holds: none pushed out
        seqs = []
        for env in recv_n(sub, QUEUE, timeout_s=30):
            seqs.append(env.body["ints"]["seq"])
            want = expected(seqs[-1])
            frame, gantry = env.body["values"]["overhead"], env.body["values"]["gantry"]
            assert frame.dtype == np.uint8 and np.array_equal(frame, want["overhead"])
            assert np.array_equal(gantry, want["gantry"])
            assert not frame.flags.writeable  # a view of shared memory others read too
            assert env.stamps["capture"] == 1000 + seqs[-1] and env.src == "camera"
        out, _ = child.communicate(timeout=30)
        assert child.returncode == 0
        assert seqs == list(range(QUEUE))
        assert sub.counters["received"] == QUEUE and sub.counters["rejected"] == 0
        assert f"'sent': {QUEUE}, 'dropped': 0" in out


def test_arrays_stay_valid_while_held_like_zmq_frames():
    """A received array keeps its sample: the publisher cannot write over it meanwhile."""
    ep = endpoint("held")
    with Subscriber(ep, ["obs"]) as sub:
        child = publisher(ep, 3 * QUEUE, "wait")
        held = []
        for seq in range(3 * QUEUE):
            child.stdin.write("\n")
            child.stdin.flush()
            env = recv_n(sub, 1)[0]
            if seq < 4:
                held.append((seq, env.body["values"]["overhead"]))  # 4 of the 8 it may hold
        child.stdin.close()
        child.wait(timeout=30)
        for seq, frame in held:
            assert np.array_equal(frame, expected(seq)["overhead"])
        assert sub.receive_errors == 0


def test_holding_more_than_the_endpoint_lends_is_counted_said_and_passes_once_let_go():
    ep = endpoint("held-full")
    said = []  # (kind, line): each line built only after take() returned, as a rate limit may
    with Subscriber(ep, ["obs"], say=lambda kind, line: said.append((kind, line))) as sub:
        child = publisher(ep, 100, "wait")

        def publish_one():
            child.stdin.write("\n")
            child.stdin.flush()

        held = []
        for _ in range(HELD):  # the receiver keeps every message: all the endpoint lends
            publish_one()
            held += recv_n(sub, 1, timeout_s=30)
        publish_one()
        deadline = time.monotonic() + 30
        while sub.receive_errors == 0 and time.monotonic() < deadline:
            assert sub.recv(timeout_ms=100) is None
        assert sub.receive_errors >= 1 and [k for k, _ in said] == ["shm"] * len(said)
        line = said[0][1]()
        assert "ExceedsMaxBorrows" in line and "copy arrays it keeps" in line
        held.clear()  # let go: the next arrival tries again, and the one waiting comes too
        publish_one()
        got = recv_n(sub, 2, timeout_s=30)
        child.stdin.close()
        child.wait(timeout=30)
        assert [e.body["ints"]["seq"] for e in got] == [HELD, HELD + 1]


def test_a_subscriber_started_late_gets_what_follows_and_nothing_before():
    ep = endpoint("late")
    child = publisher(ep, 1000, "wait")
    try:
        assert child.stdout.readline() == "up\n"
        for _ in range(5):  # five messages nobody hears
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().startswith("sent")
        with Subscriber(ep, ["obs"]) as sub:
            assert sub.recv(timeout_ms=200) is None  # no history
            for _ in range(3):
                child.stdin.write("\n")
                child.stdin.flush()
            got = recv_n(sub, 3)
            assert [e.body["ints"]["seq"] for e in got] == [5, 6, 7]
    finally:
        child.stdin.close()
        child.wait(timeout=30)


# A child that writes samples straight into the service: two bad ones (a header that declares
# more bytes than the sample holds; not rtinfer's magic), then messages through a Publisher:
# one over the subscriber's max_bytes, then three good ones; it closes when stdin does.
BAD_SENDER = textwrap.dedent("""
    import struct, sys
    import numpy as np
    from rtinfer.transport.bus import Publisher
    from rtinfer.transport.bus.shm import HEAD, MAGIC, ShmSender, payload

    raw = ShmSender(sys.argv[1], alone=True)
    def send_raw(data):
        sample = raw._pub.loan_slice_uninit(len(data))
        memoryview(payload(sample, len(data))).cast("B")[:] = data
        sample.assume_init().send()
        raw._notifier.notify()
    truncated = HEAD.pack(MAGIC, 3, 2) + struct.pack("<2Q", 40, 4096) + b"obs"
    send_raw(truncated + bytes(64))
    send_raw(b"nope" + bytes(60))
    pub = Publisher(sys.argv[1], "camera", oob_bytes=1024, bind=False)  # beside raw
    pub.publish("obs", {"values": {"big": np.zeros(8192, np.uint8)}, "ints": {"seq": 0}})
    for seq in range(1, 4):
        pub.publish("obs", {"values": {"x": np.arange(3.0)}, "ints": {"seq": seq}})
    sys.stdin.readline()  # a closing publisher takes back what was not received yet
    raw.close()
    pub.close()
""")


def test_truncated_malformed_and_oversize_samples_are_refused_counted_and_later_ones_pass():
    ep = endpoint("bad")
    said = []
    with Subscriber(
        ep, ["obs"], max_bytes=4096, say=lambda kind, line: said.append((kind, line()))
    ) as sub:
        child = subprocess.Popen([sys.executable, "-c", BAD_SENDER, ep], stdin=subprocess.PIPE)
        got = recv_n(sub, 3)
        child.communicate(timeout=30)
        assert child.returncode == 0
        assert [e.body["ints"]["seq"] for e in got] == [1, 2, 3]
        c = sub.counters
        assert (c["rejected"], c["oversize"], c["received"]) == (2, 1, 3)
        assert len(said) == 2 and all(kind == "rejected" for kind, _ in said)
        assert "truncated sample" in said[0][1] and "fix its sender" in said[0][1]
        assert "not a message of rtinfer's bus" in said[1][1]


def test_one_subscriber_waits_on_shm_and_zmq_endpoints_together(tmp_path):
    shm_ep, ipc_ep = endpoint("mixed"), f"ipc://{tmp_path}/mixed.sock"
    with (
        Publisher(ipc_ep, "robot") as ipc_pub,
        Subscriber([ipc_ep, shm_ep], ["obs", "heartbeat"]) as sub,
    ):
        # zmq's slow joiner: beat until a heartbeat arrives over ipc
        deadline = time.monotonic() + 10
        while sub.recv(timeout_ms=50) is None and time.monotonic() < deadline:
            ipc_pub.publish("heartbeat", {"node": "robot", "sent_ns": 1})
        while sub.recv(timeout_ms=100) is not None:
            pass
        child = publisher(shm_ep, 2, "go")
        first = recv_n(sub, 2, timeout_s=30)  # a blocking recv wakes for the shm endpoint
        ipc_pub.publish("heartbeat", {"node": "robot", "sent_ns": 2})
        second = recv_n(sub, 1)  # and for the zmq one, in the same wait
        child.communicate(timeout=30)
        assert [(e.topic, e.src) for e in first] == [("obs", "camera")] * 2
        assert [(e.topic, e.body["sent_ns"]) for e in second] == [("heartbeat", 2)]


def test_a_second_binding_publisher_on_a_live_name_is_refused_and_a_dead_ones_is_not():
    ep = endpoint("second")
    child = publisher(ep, 1, "wait")
    assert child.stdout.readline() == "up\n"
    with pytest.raises(EndpointInUse, match="has a live publisher already"):
        Publisher(ep, "second-run")
    with Publisher(ep, "beside", bind=False):  # sharing the name on purpose
        pass
    child.kill()  # dies without closing: its publisher must not hold the name
    child.wait(timeout=30)
    Publisher(ep, "next-run").close()


def test_curve_on_an_shm_endpoint_is_refused_in_one_line(tmp_path):
    from rtinfer.transport.curve import CurveConfig

    cfg = CurveConfig(secret_key_file=str(tmp_path / "k.key_secret"))
    with pytest.raises(ValueError, match="has no CURVE: give CURVE only to tcp://"):
        Publisher(endpoint("curve"), "camera", curve=cfg)


MISSING = textwrap.dedent("""
    import sys
    sys.modules["iceoryx2"] = None  # as on an install without the shm extra
    from rtinfer.transport.bus import Publisher, Subscriber
    for make in (lambda: Publisher("shm://obs", "camera"), lambda: Subscriber("shm://obs", ["obs"])):
        try:
            make()
        except ImportError as e:
            print(e)
""")


def test_an_shm_endpoint_without_iceoryx2_says_how_to_install_it():
    out = subprocess.run(
        [sys.executable, "-c", MISSING], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert len(out) == 2
    for line in out:
        assert line.startswith("shm://obs needs iceoryx2") and "pip install 'rtinfer[shm]'" in line


ROOT = Path(__file__).resolve().parents[1]


def blocks(page: str, marker: str) -> dict[str, str]:
    text = (ROOT / "docs" / page).read_text()
    return dict(re.findall(rf"<!-- {marker}: (\S+) -->\s*```\w*\n(.*?)```", text, re.S))


def test_the_wire_pages_shm_example_prints_what_it_says(tmp_path):
    example = blocks("wire.md", "shm-example")
    assert list(example) == ["python"]
    out = subprocess.run(
        [sys.executable, "-c", example["python"]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    page = (ROOT / "docs" / "wire.md").read_text()
    said = re.search(r"<!-- shm-example: python -->.*?```\n\nIt prints `(.*?)`", page, re.S)
    assert out.strip() == said.group(1)


@pytest.mark.slow  # 5-11 s on 2 cores (a whole launch): `make test-slow` runs it
def test_the_robots_pages_shm_camera_runs_as_written(tmp_path):
    example = blocks("robots.md", "shm-camera-example")
    assert list(example) == ["shm_camera.py", "shm_driver.py", "run.sh"]
    for name in ("shm_camera.py", "shm_driver.py"):
        (tmp_path / name).write_text(example[name])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(
        ["bash", "-e", "-c", example["run.sh"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "frames seen: True"
