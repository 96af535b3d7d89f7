"""One-way publisher -> subscriber latency of an action-chunk message across two processes.

Two paths, alternated in blocks in the same run: rtinfer's bus + wire (encode, validate,
decode), and raw pyzmq PUB/SUB sending the same msgpack bytes with no validation. Both sides
read CLOCK_MONOTONIC, which is shared by all processes of one host. Messages are paced (not
flooded) so that the figure is latency, not queueing.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

from rtinfer.bench.options import emit, parser
from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.realtime.hist import LatencyHistogram

TOPIC = "action_chunk"
RATE_HZ = 1000.0
WARMUP = 200
_HDR = struct.Struct("<QQ")  # raw path: seq, publish_ns


def sample_body() -> dict:
    """A representative action-chunk waypoint: 16 tokens (4 waypoints x 4 dims) plus values."""
    return waypoint_body(1, 0, 4, np.linspace(-0.5, 0.5, 16, dtype=np.float32), spec="0" * 16,
                         period_ns=50_000_000, start_ns=50_000_000, dest="robot",
                         tokens=np.arange(16, dtype=np.int32))


def publish_paced(send, count: int, rate_hz: float) -> None:
    """send(seq) for seq in [0, count + WARMUP) at rate_hz. Sleep, not spin: a spinning
    publisher would steal the core that ZeroMQ's I/O threads need."""
    period_ns, start = int(1e9 / rate_hz), time.monotonic_ns()
    for seq in range(count + WARMUP):
        wait_ns = start + seq * period_ns - time.monotonic_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        send(seq)
    time.sleep(0.2)


def _publish(kind: str, endpoint: str, count: int) -> None:
    body = sample_body()
    if kind == "rtinfer":
        from rtinfer.transport.bus import Publisher
        pub = Publisher(endpoint, "bench", bind=False)
        send = lambda seq: pub.publish(TOPIC, body, {"capture": wire.now_ns()})  # noqa: E731
    else:
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        payload = wire.encode(TOPIC, body, seq=0, src="bench", stamps={"capture": 0})
        topic = TOPIC.encode()
        send = lambda seq: sock.send_multipart(  # noqa: E731
            [topic, _HDR.pack(seq, time.monotonic_ns()), payload], flags=zmq.NOBLOCK)
    time.sleep(0.3)  # slow joiner: let the subscription reach the publisher
    publish_paced(send, count, RATE_HZ)


def _subscribe(kind: str, endpoint: str, count: int, ready_path: str) -> dict:
    lat = np.zeros(count, dtype=np.int64)
    got = 0
    deadline = time.monotonic() + 30 + count / RATE_HZ
    if kind == "rtinfer":
        from rtinfer.transport.bus import Subscriber
        sub = Subscriber(endpoint, [TOPIC], bind=True)
        open(ready_path, "w").close()
        while got < count and time.monotonic() < deadline:
            env = sub.recv(timeout_ms=100)
            if env is None:
                continue
            t = time.monotonic_ns()
            if env.seq >= WARMUP:
                lat[got] = t - env.stamps["publish"]
                got += 1
    else:
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, 1000)
        sock.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
        sock.bind(endpoint)
        open(ready_path, "w").close()
        while got < count and time.monotonic() < deadline:
            if not sock.poll(100):
                continue
            frames = sock.recv_multipart(copy=True)
            t = time.monotonic_ns()
            seq, sent = _HDR.unpack(frames[1])
            if seq >= WARMUP:
                lat[got] = t - sent
                got += 1
    return {"received": got, "lat_ns": lat[:got].tolist()}


def _one_block(kind: str, endpoint: str, count: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        ready, out = os.path.join(tmp, "ready"), os.path.join(tmp, "out.json")
        sub = subprocess.Popen([sys.executable, "-m", "rtinfer.bench.transport", "--role", "sub",
                                "--kind", kind, "--endpoint", endpoint, "--count", str(count),
                                "--ready", ready, "--out", out])
        while not os.path.exists(ready):
            if sub.poll() is not None:
                raise RuntimeError(f"transport bench subscriber exited early ({sub.returncode})")
            time.sleep(0.01)
        _publish(kind, endpoint, count)
        sub.wait(timeout=60)
        with open(out) as f:
            return np.asarray(json.load(f)["lat_ns"], dtype=np.int64)


def _endpoint(kind: str, tmp: str) -> str:
    if kind == "ipc":
        return f"ipc://{tmp}/bench.sock"
    with socket_free_port() as port:
        return f"tcp://127.0.0.1:{port}"


class socket_free_port:
    """A free loopback TCP port (closed again before use; fine for a benchmark)."""
    def __enter__(self) -> int:
        import socket
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.s.close()


def run(messages: int = 5000, blocks: int = 4) -> dict:
    """Alternate rtinfer / raw blocks (A B A B ...) per endpoint kind; return percentiles in us."""
    result: dict = {"messages_per_path": messages, "blocks": blocks, "rate_hz": RATE_HZ,
                    "payload_bytes": len(wire.encode(TOPIC, sample_body(), seq=0, src="bench",
                                                     stamps={"capture": 0, "publish": 0}))}
    per_block = max(1, messages // blocks)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("ipc", "tcp"):
            hists = {"rtinfer": LatencyHistogram(), "raw": LatencyHistogram()}
            for _ in range(blocks):
                for path in ("rtinfer", "raw"):
                    for v in _one_block(path, _endpoint(kind, tmp), per_block):
                        hists[path].record(int(v))
            r, w = hists["rtinfer"].percentiles_us(), hists["raw"].percentiles_us()
            result[kind] = {
                "rtinfer_p50_us": r["p50"], "rtinfer_p99_us": r["p99"], "rtinfer_max_us": r["max"],
                "raw_p50_us": w["p50"], "raw_p99_us": w["p99"], "raw_max_us": w["max"],
                "ratio_p50": round(r["p50"] / w["p50"], 3), "ratio_p99": round(r["p99"] / w["p99"], 3),
                "added_p50_us": round(r["p50"] - w["p50"], 1),
                "received": {"rtinfer": r["count"], "raw": w["count"]},
            }
    return result


def _subscriber_main() -> None:
    """The subscriber process of one block (spawned by _one_block)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["sub"], required=True)
    ap.add_argument("--kind", choices=["rtinfer", "raw"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = _subscribe(a.kind, a.endpoint, a.count, a.ready)
    with open(a.out, "w") as f:
        json.dump(res, f)


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench transport`: rtinfer's bus against raw pyzmq, one way, ipc and tcp."""
    p = parser("transport", main.__doc__)
    p.add_argument("--messages", type=int, default=5000, help="messages per endpoint kind")
    a = p.parse_args(argv)
    return emit("transport", run(messages=a.messages), a.json, table=True)

if __name__ == "__main__":
    _subscriber_main()
