"""What the arm's policy sees: its own joints, its hand, and where the target is.

Observation (a dict of numpy arrays; the `obs` body's `values`):
  joints  float32 (2N,): joint angles (rad), then joint velocities (rad/s), base first
  ee      float32 (3,): the hand tip's position (m, table frame: x forward, z up from the
          table top), from the joint angles (forward kinematics, as a robot computes it)
  target  float32 (3,): the current target point (m, same frame), as a camera would give it
`ints`: `target_id`, the index of the current target in the sequence.
"""

from __future__ import annotations

import numpy as np

KEYS = ("joints", "ee", "target")


def observe(sim) -> dict[str, np.ndarray]:
    """A fresh observation of an ArmSim (allocates; policy rate)."""
    return {
        "joints": np.concatenate([sim.qpos, sim.qvel]).astype(np.float32),
        "ee": np.asarray(sim.ee, np.float32).copy(),
        "target": np.asarray(sim.task.target, np.float32),
    }


def example_obs(n: int = 4) -> dict[str, np.ndarray]:
    """An all-zero observation of the right dtypes and shapes (packaging, checks)."""
    return {
        "joints": np.zeros(2 * n, np.float32),
        "ee": np.zeros(3, np.float32),
        "target": np.zeros(3, np.float32),
    }


def obs_body(obs: dict[str, np.ndarray], target_id: int = 0) -> dict:
    """The `obs` wire body (docs/wire.md section 5): arrays in "values", ints in "ints"."""
    return {"values": {k: obs[k] for k in KEYS}, "ints": {"target_id": int(target_id)}}


def obs_from_body(body: dict) -> dict[str, np.ndarray]:
    """Inverse of obs_body (float32 copies); KeyError or ValueError for a body that is not
    an arm observation."""
    v = body["values"]
    out = {k: np.asarray(v[k], np.float32) for k in KEYS}
    if out["ee"].shape != (3,) or out["target"].shape != (3,) or out["joints"].ndim != 1:
        raise ValueError(f"not an arm observation: shapes {[out[k].shape for k in KEYS]}")
    return out
