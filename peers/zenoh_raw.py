"""Peer baseline: raw Zenoh (eclipse-zenoh) put -> subscriber, one way, same host.

The publisher puts the exact msgpack bytes rtinfer's wire produces for the same message,
behind a 16-byte (seq, send_ns) header; the subscriber does not decode them (raw Zenoh, as
a user would call it). Settings are Zenoh's low-latency ones: peer mode, `express=True`
(no batching), a callback subscriber. Multicast scouting is off and both sessions use
explicit loopback (tcp/127.0.0.1) or unix-socket endpoints, so nothing leaves the host.
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

from peers.oneway import message_body, wait_ready
from rtinfer.bench.transport import WARMUP, publish_paced
from rtinfer.transport import wire

_HDR = struct.Struct("<QQ")
KEY = "rtinfer/bench/peer"


def available() -> str | None:
    """Installed eclipse-zenoh version, or None."""
    try:
        from importlib.metadata import version

        import zenoh  # noqa: F401

        return version("eclipse-zenoh")
    except ImportError:
        return None


def _config(endpoint: str, listen: bool):
    import zenoh

    c = zenoh.Config()
    c.insert_json5("mode", '"peer"')
    c.insert_json5("scouting/multicast/enabled", "false")
    c.insert_json5("listen/endpoints", json.dumps([endpoint] if listen else []))
    if not listen:
        c.insert_json5("connect/endpoints", json.dumps([endpoint]))
    return c


def one_way(endpoint: str, payload: str, count: int, rate_hz: float, tmp: str) -> np.ndarray:
    """One block: a subscriber process listens on `endpoint` (zenoh locator, e.g.
    tcp/127.0.0.1:7447); this process connects and puts. Returns latencies (ns)."""
    import zenoh

    ready, out = os.path.join(tmp, "zready"), os.path.join(tmp, "zout.json")
    for p in (ready, out):
        if os.path.exists(p):
            os.remove(p)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "peers.zenoh_raw",
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
    wait_ready(proc, ready)
    topic, body = message_body(payload)
    data = wire.encode(topic, body, seq=0, src="bench", stamps={"capture": 0, "publish": 0})
    session = zenoh.open(_config(endpoint, listen=False))
    try:
        pub = session.declare_publisher(KEY, express=True)
        time.sleep(0.5)  # let the subscription reach the publisher
        publish_paced(
            lambda seq: pub.put(_HDR.pack(seq, time.monotonic_ns()) + data), count, rate_hz
        )
    finally:
        session.close()
    proc.wait(timeout=60)
    with open(out) as f:
        return np.asarray(json.load(f)["lat_ns"], np.int64)


def _subscribe(endpoint: str, count: int, ready: str, out: str) -> None:
    import zenoh

    lat = np.zeros(count, np.int64)
    got, last = [0], [0.0]

    def on_sample(sample) -> None:  # runs on a zenoh thread; the main thread only sleeps
        t = time.monotonic_ns()
        seq, sent = _HDR.unpack_from(sample.payload.to_bytes())
        last[0] = time.monotonic()
        if seq >= WARMUP and got[0] < count:
            lat[got[0]] = t - sent
            got[0] += 1

    session = zenoh.open(_config(endpoint, listen=True))
    sub = session.declare_subscriber(KEY, on_sample)
    open(ready, "w").close()
    deadline = time.monotonic() + 30 + count / 100
    while got[0] < count and time.monotonic() < deadline:
        if last[0] and time.monotonic() - last[0] > 2.0:  # the publisher is done; some dropped
            break
        time.sleep(0.05)
    sub.undeclare()
    session.close()
    with open(out, "w") as f:
        json.dump({"lat_ns": lat[: got[0]].tolist()}, f)


NAME, PEER = "transport_vs_zenoh", "Zenoh (eclipse-zenoh, raw put/subscriber)"
TARGET = 1 / 1.5  # rtinfer within 1.5x of Zenoh at p50


def rows(
    messages: int,
    blocks: int,
    tmp: str,
    rate_hz: float = 1000.0,
    payloads=("chunk", "image"),
    transports=("tcp", "ipc"),
) -> list[dict]:
    """Per payload ("chunk": one action waypoint; "image": an obs with a 96x96x3 image) and
    per transport (tcp loopback; ipc vs zenoh's unixsock-stream): rtinfer bus vs raw Zenoh,
    blocks alternated A B A B, plus raw pyzmq (same bytes, no wire work) to split the gap."""
    from peers.oneway import one_way as zmq_one_way
    from peers.row import make_row, unavailable_row
    from rtinfer.bench.transport import socket_free_port

    ver = available()
    if ver is None:
        return [
            unavailable_row(
                NAME, PEER, "eclipse-zenoh is not installed (pip install eclipse-zenoh)"
            )
        ]
    out, per_block = [], max(1, messages // blocks)
    for payload in payloads:
        for transport in transports:
            got: dict[str, list] = {"rtinfer": [], "zenoh": [], "raw": []}
            for _ in range(blocks):
                for path in got:
                    if transport == "ipc":
                        ep = (
                            f"unixsock-stream/{tmp}/z.sock" if path == "zenoh" else f"ipc://{tmp}/b"
                        )
                    else:
                        with socket_free_port() as port:
                            ep = (
                                f"tcp/127.0.0.1:{port}"
                                if path == "zenoh"
                                else f"tcp://127.0.0.1:{port}"
                            )
                    lat = (
                        one_way(ep, payload, per_block, rate_hz, tmp)
                        if path == "zenoh"
                        else zmq_one_way(path, ep, payload, per_block, rate_hz, tmp)
                    )
                    got[path].extend(lat.tolist())
            row = make_row(
                NAME,
                PEER,
                ver,
                got["rtinfer"],
                got["zenoh"],
                target_speedup_p50=TARGET,
                variant=f"{payload}/{transport}",
                payload_bytes=_payload_bytes(payload),
                rate_hz=rate_hz,
                blocks=blocks,
                sent_per_path=blocks * per_block,
                raw_pyzmq_p50=_p(got["raw"], 50),
                raw_pyzmq_p99=_p(got["raw"], 99),
                peer_settings="peer mode, express=True, callback subscriber, "
                "multicast scouting off, explicit loopback endpoints",
            )
            out.append(row)
    return out


def _p(samples, q):
    from peers.row import pct

    return pct(samples, q)


def _payload_bytes(payload: str) -> int:
    topic, body = message_body(payload)
    return len(wire.encode(topic, body, seq=0, src="bench", stamps={"capture": 0, "publish": 0}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    _subscribe(a.endpoint, a.count, a.ready, a.out)
