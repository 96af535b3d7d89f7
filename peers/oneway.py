"""One-way publisher -> subscriber latency across two processes, for any payload: rtinfer's
bus (encode, validate, decode: the full cost) and raw pyzmq PUB/SUB with the same msgpack
bytes (no wire work), so a gap to a peer can be split into libzmq's share and the wire's.

A subscriber process binds; this process connects and publishes paced messages (sleeping,
not spinning, as transport.py does). Latency = the subscriber's clock after the message is
usable minus the sender's clock before sending (CLOCK_MONOTONIC is host-wide).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import zmq

from peers.rtinfer_bus import observation
from rtinfer.bench.transport import WARMUP, publish_paced, sample_body
from rtinfer.transport import wire

_HDR = struct.Struct("<QQ")  # raw paths: seq, send_ns


def message_body(kind: str) -> tuple[str, dict]:
    """(topic, body) of the one-way payloads: "chunk" (one waypoint) or "image" (an obs)."""
    if kind == "chunk":
        return "action_chunk", sample_body()
    return "obs", {"values": observation(True), "ints": {"cycle": 0}}


def one_way(
    kind: str, endpoint: str, payload: str, count: int, rate_hz: float, tmp: str
) -> np.ndarray:
    """One block of `kind` "rtinfer" or "raw": a subscriber process binds `endpoint`; this
    process connects and sends count + WARMUP messages. Returns latencies (ns) after warm-up."""
    ready, out = os.path.join(tmp, "ready"), os.path.join(tmp, "out.json")
    for p in (ready, out):
        if os.path.exists(p):
            os.remove(p)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "peers.oneway",
            "--kind",
            kind,
            "--endpoint",
            endpoint,
            "--payload",
            payload,
            "--count",
            str(count),
            "--ready",
            ready,
            "--out",
            out,
        ]
    )
    wait_ready(proc, ready)
    topic, body = message_body(payload)
    if kind == "rtinfer":
        from rtinfer.transport.bus import Publisher

        with Publisher(endpoint, "bench", bind=False) as pub:
            time.sleep(0.3)  # slow joiner
            publish_paced(lambda seq: pub.publish(topic, body), count, rate_hz)  # seq from 0
    else:
        data = wire.encode(topic, body, seq=0, src="bench", stamps={"capture": 0, "publish": 0})
        sock = zmq.Context.instance().socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        time.sleep(0.3)
        t = topic.encode()
        publish_paced(
            lambda seq: sock.send_multipart(
                [t, _HDR.pack(seq, time.monotonic_ns()), data], flags=zmq.NOBLOCK
            ),
            count,
            rate_hz,
        )
        sock.close()
    proc.wait(timeout=60)
    with open(out) as f:
        return np.asarray(json.load(f)["lat_ns"], np.int64)


def wait_ready(proc: subprocess.Popen, ready: str) -> None:
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise RuntimeError(f"benchmark subscriber exited early ({proc.returncode})")
        time.sleep(0.01)


def _receiver(kind: str, endpoint: str, topic: str):
    """A callable(timeout_ms) -> (seq, sent_ns, usable_ns) | None."""
    if kind == "rtinfer":
        from rtinfer.transport.bus import Subscriber

        sub = Subscriber(endpoint, [topic], bind=True)

        def recv(timeout_ms):
            env = sub.recv(timeout_ms=timeout_ms)
            t = wire.now_ns()  # after decode + validation: the whole receive cost counts
            return None if env is None else (env.seq, env.stamps["publish"], t)

        return recv
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
    sock.bind(endpoint)

    def recv_raw(timeout_ms):
        if not sock.poll(timeout_ms):
            return None
        frames = sock.recv_multipart()
        t = time.monotonic_ns()
        return (*_HDR.unpack(frames[1]), t)

    return recv_raw


def _subscribe(kind: str, endpoint: str, payload: str, count: int, ready: str, out: str) -> None:
    recv = _receiver(kind, endpoint, message_body(payload)[0])
    open(ready, "w").close()
    lat, deadline, last = [], time.monotonic() + 30 + count / 100, 0.0
    while len(lat) < count and time.monotonic() < deadline:
        if last and time.monotonic() - last > 2.0:  # the publisher is done; some dropped
            break
        got = recv(100)
        if got is not None:
            last = time.monotonic()
            if got[0] >= WARMUP:
                lat.append(got[2] - got[1])
    with open(out, "w") as f:
        json.dump({"lat_ns": lat}, f)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["rtinfer", "raw"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--payload", choices=["chunk", "image"], required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    _subscribe(a.kind, a.endpoint, a.payload, a.count, a.ready, a.out)
