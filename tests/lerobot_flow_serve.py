"""Serve a flow model directory with a real InferenceNode over ipc and take one chunk: what
tests/test_lerobot_smolvla.py and tests/test_lerobot_diffusion.py check against LeRobot."""

from __future__ import annotations

import zlib

import numpy as np
from conftest import recv_chunks

from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns


def body_of(model_dir, obs: dict[str, np.ndarray]) -> dict:
    """The robot's `obs` body for the example observation `obs` (by obs spec key)."""
    from rtinfer.model.obs_spec import ObsSpec

    spec = ObsSpec.load(f"{model_dir}/obs_spec.json")
    now = now_ns()
    return {
        "values": {k: v for k, v in obs.items() if k not in spec.images},
        "ints": {},
        "frames": {spec.images[k][0]: {"image": obs[k], "capture_ns": now} for k in spec.images},
    }


def serve_one(model_dir, obs: dict[str, np.ndarray], tmp_path, seed: int = 3):
    """(chunk [H, D] the node sent for `obs`, the noise x it started from [1, H_m, D_m]):
    the node's noise is seeded with (seed, crc32(robot), the observation's seq)."""
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
    from rtinfer.model.flow_model import FlowModelDir

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act")}
    pub = Publisher(eps["obs"], "robot7")
    node = InferenceNode(
        model_dir,
        eps["obs"],
        eps["act"],
        cfg=InferenceNodeConfig(deadline_ms=60_000.0, auto_budget=False, seed=seed),
    )
    sub = Subscriber(eps["act"], ["action_chunk"])
    horizon, cycles, msgs = FlowModelDir.load(model_dir).action.horizon, {}, []
    try:
        # the slow joiners both ways: publish and answer until one cycle's whole chunk came
        # (the first answers can go out before this subscriber is connected, and are lost)
        for _ in range(200):
            pub.publish("obs", body_of(model_dir, obs), {"capture": now_ns()})
            node.spin_once(50)
            for env in recv_chunks(sub, 4 * horizon, timeout_s=0.05):
                cycles.setdefault(env.body["cycle"], []).append(env)
            whole = [c for c, got in cycles.items() if len(got) == horizon]
            if whole:
                msgs = cycles[whole[0]]
                break
    finally:
        for s in (node, pub, sub):
            s.close()
    assert msgs, "the node answered no observation"
    b0 = msgs[0].body
    assert b0["dest"] == "robot7" and all(m.body["cycle"] == b0["cycle"] for m in msgs)
    chunk = np.array(
        [m.body["values"] for m in sorted(msgs, key=lambda m: m.body["index"])], np.float32
    )
    runner = FlowRunner(FlowModelDir.load(model_dir))
    runner.start(seed=(seed, zlib.crc32(b"robot7"), int(b0["cycle"])))
    return chunk, runner.x.copy()
