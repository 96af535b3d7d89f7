"""Row `transport_vs_lerobot_grpc`: observation -> action-chunk round trip on one host.

rtinfer: obs published on the bus, the responder streams 4 action_chunk messages, the
round trip ends at the last waypoint. Peer: LeRobot's async-inference protocol (lerobot_grpc:
gRPC + pickle, SendObservations then the receiver's GetActions returns the chunk). Both
responders are separate processes doing the same work; blocks of cycles alternate
A B A B; cycles are paced (one in flight at a time) so the figure is latency.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from peers.row import make_row, package_version, unavailable_row
from peers.rtinfer_bus import BusClient, observation
from rtinfer.bench.transport import socket_free_port

NAME, PEER = "transport_vs_lerobot_grpc", "LeRobot async inference (gRPC + pickle)"
TARGET = 5.0


def _port() -> int:
    with socket_free_port() as port:
        return port


def _endpoint(transport: str, tmp: str, name: str) -> str:
    return f"ipc://{tmp}/{name}" if transport == "ipc" else f"tcp://127.0.0.1:{_port()}"


VARIANTS = (
    ("image96+state", True, True),
    ("state_only", False, True),
    ("state_only_back_to_back", False, False),
)  # (name, image, paced)


def rows(
    cycles: int,
    blocks: int,
    tmp: str,
    transport: str = "ipc",
    rate_hz: float = 200.0,
    warmup: int = 20,
) -> list[dict]:
    """One row per VARIANTS entry, `cycles` round trips per path each. Paced variants start
    a cycle every 1/rate_hz s (processes sleep in between, as a policy loop's do); the
    back-to-back one starts the next cycle at once (no idle wake-ups: the transport alone)."""
    if package_version("grpcio") is None or package_version("protobuf") is None:
        return [
            unavailable_row(
                NAME, PEER, "grpcio/protobuf not installed (pip install 'rtinfer[bench]')"
            )
        ]
    from peers import lerobot_grpc

    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "peers.lerobot_grpc", "--port", str(port)])
    bus = grpc = None
    try:
        bus = BusClient(_endpoint(transport, tmp, "obs"), _endpoint(transport, tmp, "actions"))
        grpc = lerobot_grpc.RobotClient(port)
        out, step = [], 0
        for variant, image, paced in VARIANTS:
            obs = observation(image)
            got: dict[str, list] = {"rtinfer": [], "peer": []}
            for client in (bus, grpc):  # warm both paths up, unrecorded
                for _ in range(warmup):
                    client.roundtrip_ns(step, obs)
                    step += 1
            per_block = max(1, cycles // blocks)
            for _ in range(blocks):
                for name, client in (("rtinfer", bus), ("peer", grpc)):
                    start = time.monotonic()
                    for k in range(per_block):
                        got[name].append(client.roundtrip_ns(step, obs))
                        step += 1
                        wait = start + (k + 1) / rate_hz - time.monotonic()
                        if paced and wait > 0:
                            time.sleep(wait)
            nbytes = sum(v.nbytes for v in obs.values())
            out.append(
                make_row(
                    NAME,
                    PEER,
                    f"reproduction (grpcio {package_version('grpcio')})",
                    np.asarray(got["rtinfer"]),
                    np.asarray(got["peer"]),
                    target_speedup_p50=TARGET,
                    variant=variant,
                    observation_bytes=nbytes,
                    blocks=blocks,
                    rate_hz=rate_hz if paced else None,
                    transport=f"rtinfer {transport}:// (its one-host default); gRPC tcp 127.0.0.1 "
                    "(LeRobot's host:port)",
                    peer_settings="LeRobot defaults (obs_queue_timeout 2 s, 4 server workers, 2 MB "
                    "chunks, lerobot channel options) except inference_latency=0 "
                    "(default 1/30 s would pad every reply to 33 ms)",
                    note="lerobot not installed (it pins another torch); its services.proto and "
                    "policy_server/robot_client behaviour reproduced in peers/lerobot_grpc.py",
                )
            )
        return out
    finally:
        for c in (grpc, bus):
            if c is not None:
                c.close()
        server.kill()
        server.wait()
