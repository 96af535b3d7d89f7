"""Camera frame transport, camera -> node: capture stamp to "the receiver holds a numpy array
over the frame's bytes", for uint8 frames of 96x96x3, 224x224x3 and 640x480x3.

Same host: rtinfer's bus over ipc (out-of-band array frames, no Python-level copy), the bus
over shm:// (iceoryx2 underneath), plain pyzmq over ipc with copies, raw iceoryx2 shared memory.
tcp loopback: rtinfer's bus (raw bytes),
and JPEG (libjpeg-turbo through simplejpeg; encode and decode also measured on their own).
Sender and receiver are separate processes (the receiver is spawned per block); both read
CLOCK_MONOTONIC, which all processes of one host share. The baseline is a numpy copyto of the
same bytes in this process, run in blocks interleaved with the paths'. Frames are paced (not
flooded), so the figures are latency, not queueing. Every received frame is checked against
the bytes sent (JPEG: its shape and mean error). The 1-minute load average is reported
beside each shape, since a loaded host moves these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from rtinfer.bench.camera_paths import (
    JPEG_QUALITY,
    LOSSLESS,
    PATHS,
    frame_pool,
    make_receiver,
    make_sender,
)
from rtinfer.bench.options import emit, parser
from rtinfer.bench.transport import socket_free_port
from rtinfer.realtime.hist import LatencyHistogram

SHAPES = ((96, 96, 3), (224, 224, 3), (480, 640, 3))
RATE_HZ = 60.0  # frames per second per block, above a camera's 15-30 Hz
WARMUP = 10  # frames per block not counted: connection set-up, first-touch page faults
TARGET = {"shape": "224x224x3", "same_host_p50_us": 500.0}  # a frame within 0.5 ms p50
SAME_HOST = ("bus_ipc", "bus_shm", "zmq_copy_ipc", "iceoryx2")


def shape_name(shape) -> str:
    h, w, c = shape
    return f"{w}x{h}x{c}"


def available(path: str) -> str | None:
    """None if the path can run here, else why not."""
    module, extra = {
        "iceoryx2": ("iceoryx2", "bench"),
        "bus_shm": ("iceoryx2", "shm"),
        "jpeg_tcp": ("simplejpeg", "bench"),
    }.get(path, (None, None))
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed: pip install 'rtinfer[{extra}]'"
    return None


def _endpoint(path: str, tmp: str, block: int) -> str:
    if path == "iceoryx2":
        return f"rtinfer/bench/camera/{os.getpid()}/{block}"
    if path == "bus_shm":
        return f"shm://bench-camera/{os.getpid()}/{block}"
    if path.endswith("_ipc"):
        return f"ipc://{tmp}/camera-{block}.sock"
    with socket_free_port() as port:
        return f"tcp://127.0.0.1:{port}"


def _send_block(path: str, endpoint: str, shape, count: int, pool) -> list[int]:
    """Send WARMUP + count frames at RATE_HZ; the encode times (ns) of the counted ones."""
    sender = make_sender(path, endpoint, int(np.prod(shape)))
    time.sleep(0.3)  # slow joiner: let the subscription reach the publisher
    period_ns, enc = int(1e9 / RATE_HZ), []
    start = time.monotonic_ns()
    for seq in range(WARMUP + count):
        wait_ns = start + seq * period_ns - time.monotonic_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        e = sender.send(seq, pool[seq % len(pool)], time.monotonic_ns())
        if seq >= WARMUP:
            enc.append(e)
    time.sleep(0.3)  # zmq sends from its I/O thread: don't close under it
    sender.close()
    return enc


def _receive(path: str, endpoint: str, shape, count: int, ready: str) -> dict:
    """The receiver process's work: latency, decode time and byte checks per counted frame."""
    pool = frame_pool(shape)
    recv = make_receiver(path, endpoint, shape)
    open(ready, "w").close()
    lat, dec, bad_shape, inexact, err, seqs = [], [], 0, 0, [], []
    deadline = time.monotonic() + 30 + (WARMUP + count) / RATE_HZ
    while len(lat) < count and time.monotonic() < deadline:
        got = recv.take(100)
        if got is None:
            continue
        t = time.monotonic_ns()
        seq, capture, arr, dec_ns = got
        if seq < WARMUP:
            continue
        lat.append(t - capture)
        dec.append(dec_ns)
        seqs.append(seq)
        want = pool[seq % len(pool)]
        if arr.shape != want.shape or arr.dtype != np.uint8:
            bad_shape += 1
        elif path in LOSSLESS:
            inexact += not np.array_equal(arr, want)
        else:
            err.append(float(np.abs(arr.astype(np.int16) - want).mean()))
    return {
        "lat_ns": lat,
        "decode_ns": dec,
        "seqs": seqs,
        "bad_shape": bad_shape,
        "inexact": inexact,
        "mean_abs_err": err,
        "shape": list(shape),
    }


def _one_block(path: str, shape, count: int, tmp: str, block: int, pool) -> tuple[dict, list]:
    endpoint = _endpoint(path, tmp, block)
    ready, out = os.path.join(tmp, f"ready-{block}"), os.path.join(tmp, f"out-{block}.json")
    sub = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.bench.camera",
            "--role",
            "receiver",
            "--path",
            path,
            "--endpoint",
            endpoint,
            "--count",
            str(count),
            "--shape",
            ",".join(map(str, shape)),
            "--ready",
            ready,
            "--out",
            out,
        ]
    )
    try:
        while not os.path.exists(ready):
            if sub.poll() is not None:
                raise RuntimeError(
                    f"camera bench receiver ({path}) exited early ({sub.returncode})"
                )
            time.sleep(0.01)
        enc = _send_block(path, endpoint, shape, count, pool)
        sub.wait(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    with open(out) as f:
        return json.load(f), enc


def _memcpy_block(frame: np.ndarray, count: int, hist: LatencyHistogram) -> None:
    dst = np.empty_like(frame)
    np.copyto(dst, frame)  # first touch of dst's pages: not part of a copy in a loop
    for _ in range(count):
        t = time.monotonic_ns()
        np.copyto(dst, frame)
        hist.record(time.monotonic_ns() - t)


def _pct(h: LatencyHistogram) -> dict:
    p = h.percentiles_us()
    return {"p50_us": p["p50"], "p99_us": p["p99"], "count": int(p["count"])}


def run(frames: int = 300, blocks: int = 3, paths: tuple[str, ...] = PATHS, shapes=SHAPES) -> dict:
    """Per shape, the paths and the memcpy baseline alternate in blocks (A B C M A B C M ...);
    percentiles in us, counts of frames received and checked."""
    paths = tuple(p for p in paths if available(p) is None)
    result: dict = {
        "frames_per_path": frames,
        "blocks": blocks,
        "rate_hz": RATE_HZ,
        "paths": list(paths),
        "skipped": {p: available(p) for p in PATHS if available(p) is not None},
        "cpus": os.cpu_count(),
        "shapes": {},
    }
    per_block = max(1, frames // blocks)
    with tempfile.TemporaryDirectory() as tmp:
        block = 0
        for shape in shapes:
            pool = frame_pool(shape)
            load_before = os.getloadavg()[0]
            hists = {p: LatencyHistogram() for p in ("memcpy", *paths)}
            extra = {
                p: {
                    "sent": 0,
                    "received": 0,
                    "bad_shape": 0,
                    "out_of_order": 0,
                    **({"inexact": 0} if p in LOSSLESS else {}),
                }
                for p in paths
            }
            enc_h, dec_h, errs = LatencyHistogram(), LatencyHistogram(), []
            for _ in range(blocks):
                for path in paths:
                    block += 1
                    got, enc = _one_block(path, shape, per_block, tmp, block, pool)
                    for v in got["lat_ns"]:
                        hists[path].record(int(v))
                    e = extra[path]
                    e["sent"] += per_block
                    e["received"] += len(got["lat_ns"])
                    e["bad_shape"] += got["bad_shape"]
                    if path in LOSSLESS:
                        e["inexact"] += got["inexact"]
                    e["out_of_order"] += int(np.sum(np.diff(got["seqs"]) <= 0))
                    if path == "jpeg_tcp":
                        for v in enc:
                            enc_h.record(int(v))
                        for v in got["decode_ns"]:
                            dec_h.record(int(v))
                        errs += got["mean_abs_err"]
                _memcpy_block(pool[0], per_block, hists["memcpy"])
            row = {
                "bytes": int(np.prod(shape)),
                "load_1min_before": round(load_before, 2),
                "load_1min_after": round(os.getloadavg()[0], 2),
                "memcpy": _pct(hists["memcpy"]),
            }
            base = max(row["memcpy"]["p50_us"], 1e-3)
            for path in paths:
                row[path] = {
                    **_pct(hists[path]),
                    **extra[path],
                    "ratio_p50_vs_memcpy": round(hists[path].percentiles_us()["p50"] / base, 1),
                }
            if "jpeg_tcp" in paths:
                e, d = enc_h.percentiles_us(), dec_h.percentiles_us()
                row["jpeg_tcp"].update(
                    encode_p50_us=e["p50"],
                    encode_p99_us=e["p99"],
                    decode_p50_us=d["p50"],
                    decode_p99_us=d["p99"],
                    quality=JPEG_QUALITY,
                    mean_abs_err=round(float(np.mean(errs)), 2) if errs else None,
                )
            result["shapes"][shape_name(shape)] = row
    result["target"] = _target(result)
    return result


def _target(result: dict) -> dict:
    row = result["shapes"].get(TARGET["shape"])
    same = [p for p in SAME_HOST if row and p in row]
    if not same:
        return {**TARGET, "best": None, "met": None}
    best = min(same, key=lambda p: row[p]["p50_us"])
    return {
        **TARGET,
        "best": best,
        "best_p50_us": row[best]["p50_us"],
        "met": row[best]["p50_us"] <= TARGET["same_host_p50_us"],
    }


def _receiver_main() -> None:
    """The receiver process of one block (spawned by _one_block)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["receiver"], required=True)
    ap.add_argument("--path", choices=list(PATHS), required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shape = tuple(int(v) for v in a.shape.split(","))
    res = _receive(a.path, a.endpoint, shape, a.count, a.ready)
    with open(a.out, "w") as f:
        json.dump(res, f)


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench camera`: camera frame transport, same host and tcp, against memcpy."""
    p = parser("camera", main.__doc__)
    p.add_argument("--frames", type=int, default=300, help="frames per path and shape")
    p.add_argument("--blocks", type=int, default=3, help="interleaved blocks per path and shape")
    p.add_argument(
        "--quick",
        action="store_true",
        help="20 frames per path in one block: "
        "checks that every path works, too few frames for its percentiles",
    )
    p.add_argument(
        "--paths", default=",".join(PATHS), help="comma-separated subset of " + ", ".join(PATHS)
    )
    a = p.parse_args(argv)
    paths = tuple(s for s in a.paths.split(",") if s)
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        p.error(f"unknown path(s) {unknown}: choose from {list(PATHS)}")
    frames, blocks = (20, 1) if a.quick else (a.frames, a.blocks)
    return emit("camera", run(frames=frames, blocks=blocks, paths=paths), True)


if __name__ == "__main__":
    if "--role" in sys.argv:
        _receiver_main()
    else:
        sys.exit(main())
