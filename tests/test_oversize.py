"""One frame over a receiver's size limits, from a publisher in another process, over real
ipc and tcp sockets (docs/wire.md, "Size limits"):

- over ``max_bytes`` (but under the hard cap): dropped and counted by the Subscriber, and
  the session lives on: everything published afterwards arrives;
- over the hard cap (libzmq's ZMQ_MAXMSGSIZE): libzmq ends the session; the Subscriber
  counts it, reconnects, and receives what is published after the reconnect. What was
  published while it was disconnected is lost, and shows as a seq gap of exactly that size.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtinfer.transport.bus import Subscriber, hard_cap_bytes

MAX_BYTES = 100_000
REPO = Path(__file__).resolve().parents[1]

# The publisher process: a real rtinfer Publisher, driven one command per stdin line;
# each reply is one stdout line "ok <seq> ..." (the seqs it used).
PUBLISHER = r"""
import sys
import numpy as np
from rtinfer.transport import wire
from rtinfer.transport.bus import Publisher

pub = Publisher(sys.argv[1], "big", hwm=5000, oob_bytes=1 << 30)  # arrays inline: one frame
seq = 0  # mirrors the publisher's own seq: it adds 1 per publish


def obs(nbytes):
    # an obs message whose one envelope frame is exactly nbytes long
    n = nbytes - 100
    for _ in range(50):
        body = {"values": {"img": np.zeros(n, np.uint8)}, "ints": {}}
        stamps = {"publish": wire.now_ns()}
        size = len(wire.encode("obs", body, seq=seq, src="big", stamps=stamps, max_bytes=1 << 30))
        if size == nbytes:
            return body, stamps
        n += nbytes - size
    raise SystemExit(f"no obs of exactly {nbytes} bytes")


print("ready", pub.endpoint, flush=True)
for line in sys.stdin:
    cmd, arg = line.split()
    first = seq
    if cmd == "hb":
        for i in range(int(arg)):
            pub.publish("heartbeat", {"node": "big", "sent_ns": i})
            seq += 1
    elif cmd == "obs":
        body, stamps = obs(int(arg))
        pub.publish("obs", body, stamps)
        seq += 1
    print("ok", first, seq - 1, pub.counters["dropped"], flush=True)
"""


class PublisherProcess:
    def __init__(self, endpoint: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PUBLISHER, endpoint],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline().split()
        assert ready and ready[0] == "ready", f"publisher did not start ({self.proc.poll()})"
        self.endpoint = ready[1]

    def ask(self, cmd: str) -> tuple[int, int]:
        """Run one command; (first seq, last seq) it published. Nothing may drop at the sender."""
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        assert reply and reply[0] == "ok", f"publisher: {cmd!r} got {reply}"
        assert reply[3] == "0", "the publisher dropped a message"
        return int(reply[1]), int(reply[2])

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def publisher(request, tmp_path):
    kind = request.param
    p = PublisherProcess(f"ipc://{tmp_path}/big.sock" if kind == "ipc" else "tcp://127.0.0.1:*")
    yield p
    p.close()


def link(pub: PublisherProcess, sub: Subscriber, timeout_s: float = 10.0) -> None:
    """Beat the slow joiner: heartbeats until one arrives, then drain the rest."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pub.ask("hb 1")
        if sub.recv(timeout_ms=20) is not None:
            while sub.recv(timeout_ms=100) is not None:
                pass
            return
    raise AssertionError("subscriber never received a message")


def recv_seqs(sub: Subscriber, n: int, timeout_s: float = 10.0) -> list[int]:
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        env = sub.recv(timeout_ms=100)
        if env is not None:
            got.append(env.seq)
    return got


@pytest.mark.parametrize("publisher", ["ipc", "tcp"], indirect=True)
def test_a_message_one_byte_over_max_bytes_is_dropped_and_counted_and_the_session_lives_on(
    publisher,
):
    with Subscriber(publisher.endpoint, ["heartbeat", "obs"], max_bytes=MAX_BYTES, hwm=5000) as sub:
        link(publisher, sub)
        at_limit, _ = publisher.ask(f"obs {MAX_BYTES}")
        assert recv_seqs(sub, 1) == [at_limit]  # max_bytes itself is allowed
        publisher.ask(f"obs {MAX_BYTES + 1}")
        first, last = publisher.ask("hb 1000")
        assert recv_seqs(sub, 1000) == list(range(first, last + 1))  # all 1,000, in order
        assert sub.counters["oversize"] == 1
        assert sub.counters["rejected"] == 0
        assert sub.sessions_ended == 0 and sub.reconnects == 0


@pytest.mark.parametrize("publisher", ["ipc", "tcp"], indirect=True)
def test_a_frame_over_the_hard_cap_ends_the_session_and_the_subscriber_reconnects(publisher):
    with Subscriber(publisher.endpoint, ["heartbeat", "obs"], max_bytes=MAX_BYTES, hwm=5000) as sub:
        assert sub.hard_cap_bytes == hard_cap_bytes(MAX_BYTES) > MAX_BYTES
        link(publisher, sub)
        before, _ = publisher.ask("hb 1")
        assert recv_seqs(sub, 1) == [before]
        received = sub.counters["received"]
        big, _ = publisher.ask(f"obs {sub.hard_cap_bytes + 1}")
        # Publish while disconnected, until something gets through again.
        t0, deadline = time.monotonic(), time.monotonic() + 10
        while (env := sub.recv(timeout_ms=10)) is None:
            assert time.monotonic() < deadline, "the subscriber never reconnected"
            publisher.ask("hb 1")
        print(f"reconnected after {time.monotonic() - t0:.3f} s, seq gap {env.seq - before - 1}")
        # What was sent while disconnected is gone, and the seq gap says exactly how much:
        # the oversize message and every heartbeat published before the reconnect...
        assert env.seq > big and sub.counters["received"] == received + 1
        # ...and from the first message after the reconnect on, nothing is lost.
        _, last = publisher.ask("hb 100")
        assert recv_seqs(sub, last - env.seq) == list(range(env.seq + 1, last + 1))
        assert sub.sessions_ended == 1 and sub.reconnects == 1
        assert sub.counters["oversize"] == 0 and sub.counters["rejected"] == 0
