"""rtinfer's side of the round-trip peer row: observation -> action chunk over
rtinfer.transport.bus.

This process binds PUB `obs` and SUB `actions`; a responder process (`--role respond`)
answers each obs with the chunk's 4 waypoints as 4 action_chunk messages (streamed, as the
inference node does); the round trip ends when the last waypoint has been received and
decoded. The responder does the same work as the gRPC peer's (`respond_chunk`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

from rtinfer.transport import wire
from rtinfer.transport.action_chunk import waypoint_body

HORIZON = 4
MAX_LIFETIME_S = 900  # bounded even if the parent dies without killing it
PROBE = 1 << 40  # cycle id of the connection probes (real cycles count from 0)


def respond_chunk(state: np.ndarray, horizon: int = 4) -> np.ndarray:
    """The responder's work, identical on both paths: (horizon, 4) float32 waypoints."""
    base = np.asarray(state, np.float32)[:4] * 0.5
    return np.clip(
        base[None, :] + 0.01 * np.arange(1, horizon + 1, dtype=np.float32)[:, None], -1.0, 1.0
    )


def observation(image: bool, rng: np.random.Generator | None = None) -> dict:
    """A LeRobot-style raw observation: 6 joint positions (+ a 96x96x3 uint8 camera image)."""
    rng = rng or np.random.default_rng(0)
    obs = {"state": rng.uniform(-1, 1, 6).astype(np.float32)}
    if image:
        obs["image"] = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
    return obs


def _respond(obs_ep: str, act_ep: str) -> None:
    from rtinfer.transport.bus import Publisher, Subscriber

    sub = Subscriber(obs_ep, ["obs"])
    pub = Publisher(act_ep, "responder", bind=False)
    tokens = np.zeros(4, np.int32)
    parent, end = os.getppid(), time.monotonic() + MAX_LIFETIME_S
    while os.getppid() == parent and time.monotonic() < end:  # the parent kills it when done
        env = sub.recv(timeout_ms=200)
        if env is None:
            continue
        chunk = respond_chunk(env.body["values"]["state"], HORIZON)
        for i, wp in enumerate(chunk):
            pub.publish(
                "action_chunk",
                waypoint_body(
                    env.body["ints"]["cycle"],
                    i,
                    HORIZON,
                    wp,
                    spec="0" * 16,
                    period_ns=50_000_000,
                    start_ns=50_000_000,
                    dest=env.src,
                    tokens=tokens,
                ),
            )


class BusClient:
    """Round trips through a responder process over rtinfer.transport.bus (tcp or ipc endpoints)."""

    def __init__(self, obs_ep: str, act_ep: str):
        from rtinfer.transport.bus import Publisher, Subscriber

        self.pub = Publisher(obs_ep, "client")
        self.sub = Subscriber(act_ep, ["action_chunk"], bind=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "peers.rtinfer_bus",
                "--role",
                "respond",
                "--obs",
                self.pub.endpoints[0],
                "--actions",
                self.sub.endpoints[0],
            ]
        )
        deadline = time.monotonic() + 30
        while self._try(PROBE, observation(False), 0.2) is None:  # slow joiners, both directions
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("rtinfer responder did not answer within 30 s")

    def _try(self, step: int, obs: dict, timeout_s: float) -> int | None:
        t0 = wire.now_ns()
        self.pub.publish("obs", {"values": obs, "ints": {"cycle": step}}, {"capture": t0})
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            env = self.sub.recv(timeout_ms=50)
            if env is not None and env.body["cycle"] == step and env.body["index"] == HORIZON - 1:
                return wire.now_ns() - t0
        return None

    def roundtrip_ns(self, step: int, obs: dict, timeout_s: float = 10.0) -> int:
        rt = self._try(step, obs, timeout_s)
        if rt is None:
            raise RuntimeError(f"no chunk for cycle {step} within {timeout_s} s")
        return rt

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.pub.close()
        self.sub.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["respond"], required=True)
    ap.add_argument("--obs", required=True)
    ap.add_argument("--actions", required=True)
    a = ap.parse_args()
    _respond(a.obs, a.actions)
