"""One-way publisher -> subscriber latency of an action-chunk message across two processes.

Three paths, alternated in blocks in the same run, each sending the same two ZeroMQ frames
(the topic, then the envelope):
  rtinfer  rtinfer's bus + wire (Publisher.publish, Subscriber.recv: encode, validate, decode);
  wire     plain pyzmq sockets around wire.encode_frames / wire.decode (the codec, no bus);
  raw      plain pyzmq sending the envelope rtinfer would send, pre-encoded, its `publish`
           stamp written in place (the same bytes), received with no decoding at all.
So rtinfer - raw is what rtinfer adds, wire - raw its codec's share and rtinfer - wire the
bus's. Both sides read CLOCK_MONOTONIC, which all processes of one host share. Messages are
paced (not flooded) so that the figure is latency, not queueing.
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
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body

TOPIC = "action_chunk"
RATE_HZ = 1000.0
WARMUP = 200
PATHS = ("rtinfer", "wire", "raw")
_STAMP = struct.Struct(">Q")  # a msgpack uint64's 8 bytes: the raw path's `publish` stamp
_BIG_NS = 2**40  # a placeholder stamp that msgpack writes as uint64, as it does real ones


def sample_body() -> dict:
    """A representative action-chunk waypoint: 16 tokens (4 waypoints x 4 dims) plus values."""
    return waypoint_body(
        1,
        0,
        4,
        np.linspace(-0.5, 0.5, 16, dtype=np.float32),
        spec="0" * 16,
        period_ns=50_000_000,
        start_ns=50_000_000,
        dest="robot",
        tokens=np.arange(16, dtype=np.int32),
    )


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


def raw_message(body: dict) -> tuple[bytearray, int]:
    """(the envelope rtinfer sends, offset of its `publish` stamp's 8 bytes) for the raw path,
    which writes its send time there. Its seq stays fixed: a message or two of another seq
    width would differ by a byte or two, not in kind."""
    data = wire.encode(
        TOPIC, body, seq=WARMUP, src="bench", stamps={"capture": _BIG_NS, "publish": _BIG_NS}
    )
    return bytearray(data), data.index(b"\xa7publish\xcf") + 9


def _pyzmq(kind: int, endpoint: str, bind: bool) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.SNDHWM if kind == zmq.PUB else zmq.RCVHWM, 1000)
    sock.setsockopt(zmq.LINGER, 0)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
    (sock.bind if bind else sock.connect)(endpoint)
    return sock


def _publish(kind: str, endpoint: str, count: int) -> None:
    body = sample_body()
    topic, nb, nb_more = TOPIC.encode(), int(zmq.NOBLOCK), int(zmq.NOBLOCK | zmq.SNDMORE)
    if kind == "rtinfer":
        from rtinfer.transport.bus import Publisher

        pub = Publisher(endpoint, "bench", bind=False)
        send = lambda seq: pub.publish(TOPIC, body, {"capture": wire.now_ns()})  # noqa: E731
    elif kind == "wire":  # what Publisher.publish does, minus the bus around it
        sock = _pyzmq(zmq.PUB, endpoint, bind=False)

        def send(seq: int) -> None:
            caller = {"capture": wire.now_ns()}
            stamps = dict(caller)  # as publish() copies the caller's stamps
            stamps["publish"] = wire.now_ns()
            frames = wire.encode_frames(TOPIC, body, seq=seq, src="bench", stamps=stamps)
            sock.send(topic, nb_more)
            sock.send(frames[0], nb)
    else:
        sock = _pyzmq(zmq.PUB, endpoint, bind=False)
        buf, at = raw_message(body)

        def send(seq: int) -> None:
            _STAMP.pack_into(buf, at, time.monotonic_ns())
            sock.send(topic, nb_more)
            sock.send(buf, nb)

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
        sock = _pyzmq(zmq.SUB, endpoint, bind=True)
        open(ready_path, "w").close()
        nb, topics = int(zmq.NOBLOCK), (TOPIC,)
        at = raw_message(sample_body())[1]
        n = 0
        while got < count and time.monotonic() < deadline:
            if not sock.poll(100):
                continue
            sock.recv(nb)  # the topic frame
            data = sock.recv(nb)
            if kind == "wire":
                env = wire.decode(data, topics=topics)
                t = time.monotonic_ns()
                sent, warm = env.stamps["publish"], env.seq < WARMUP
            else:
                t = time.monotonic_ns()
                (sent,) = _STAMP.unpack_from(data, at)
                warm = n < WARMUP  # the raw seq is fixed: count the warm-up here
            n += 1
            if not warm:
                lat[got] = t - sent
                got += 1
    return {"received": got, "lat_ns": lat[:got].tolist()}


def _one_block(kind: str, endpoint: str, count: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        ready, out = os.path.join(tmp, "ready"), os.path.join(tmp, "out.json")
        sub = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rtinfer.bench.transport",
                "--role",
                "sub",
                "--kind",
                kind,
                "--endpoint",
                endpoint,
                "--count",
                str(count),
                "--ready",
                ready,
                "--out",
                out,
            ]
        )
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


def run(messages: int = 5000, blocks: int = 4, paths: tuple[str, ...] = PATHS) -> dict:
    """Alternate the paths in blocks (A B C A B C ...) per endpoint kind; percentiles in us.

    `paths` must include "rtinfer" and "raw"; "wire" adds the codec/bus split."""
    result: dict = {
        "messages_per_path": messages,
        "blocks": blocks,
        "rate_hz": RATE_HZ,
        "payload_bytes": len(raw_message(sample_body())[0]),
        "paths": list(paths),
    }
    per_block = max(1, messages // blocks)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("ipc", "tcp"):
            hists = {path: LatencyHistogram() for path in paths}
            for _ in range(blocks):
                for path in paths:
                    for v in _one_block(path, _endpoint(kind, tmp), per_block):
                        hists[path].record(int(v))
            pct = {path: h.percentiles_us() for path, h in hists.items()}
            r, w = pct["rtinfer"], pct["raw"]
            row = result[kind] = {
                "rtinfer_p50_us": r["p50"],
                "rtinfer_p99_us": r["p99"],
                "rtinfer_max_us": r["max"],
                "raw_p50_us": w["p50"],
                "raw_p99_us": w["p99"],
                "raw_max_us": w["max"],
                "ratio_p50": round(r["p50"] / w["p50"], 3),
                "ratio_p99": round(r["p99"] / w["p99"], 3),
                "added_p50_us": round(r["p50"] - w["p50"], 1),
                "received": {path: p["count"] for path, p in pct.items()},
            }
            if "wire" in pct:  # the codec's share of the added cost, and the bus's
                c = pct["wire"]
                row.update(
                    wire_p50_us=c["p50"],
                    wire_p99_us=c["p99"],
                    codec_added_p50_us=round(c["p50"] - w["p50"], 1),
                    bus_added_p50_us=round(r["p50"] - c["p50"], 1),
                )
    return result


def _subscriber_main() -> None:
    """The subscriber process of one block (spawned by _one_block)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["sub"], required=True)
    ap.add_argument("--kind", choices=list(PATHS), required=True)
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
