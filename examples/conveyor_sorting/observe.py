"""What the robot may know: a camera's view of the belt, its own joints, the instruction.

Observation (a dict of numpy arrays, the gymnasium observation too):
  objects      float32 (K, 4): rows (class id, x m, y m, valid 1/0) for up to K objects
               resting on the belt inside the camera zone, most downstream (largest x,
               most urgent) first; unused rows are all zero.
  gantry       float32 (8,): cup position x, y, z (m), velocity (m/s), suction valve
               open (1/0), holding an object (1/0, the vacuum sensor).
  held         float32 (1,): class id of the object on the suction cup, -1 when none (the
               perception stage saw what was picked; without it no policy could know
               which bin a carried object belongs in).
  instruction  int32 (C,): instruction[c] = bin index for class c (a permutation).
Objects held by the cup, falling, in bins or parked are not visible: the camera sees
the belt. Nothing here is privileged simulator state.
"""

from __future__ import annotations

import numpy as np

from .cell import ConveyorCell
from .pool import LIVE

GANTRY_FIELDS = ("x", "y", "z", "vx", "vy", "vz", "suction", "holding")


def observe(cell: ConveyorCell) -> dict[str, np.ndarray]:
    """A fresh observation dict for the cell's current state (allocates; policy-rate)."""
    cfg, p = cell.cfg, cell.pool
    q = p.qpos
    seen = (
        (p.state == LIVE)
        & (q[:, 0] >= cfg.camera_x[0])
        & (q[:, 0] <= cfg.camera_x[1])
        & (np.abs(q[:, 1]) <= cfg.belt_half_width)
        & (q[:, 2] > cfg.belt_top)
        & (q[:, 2] < cfg.belt_top + 0.1)
    )
    if cell.held >= 0:
        seen[cell.held] = False
    idx = np.flatnonzero(seen)
    idx = idx[np.argsort(-q[idx, 0], kind="stable")][: cfg.visible_k]
    objects = np.zeros((cfg.visible_k, 4), np.float32)
    objects[: len(idx), 0] = p.slot_class[idx]
    objects[: len(idx), 1:3] = q[idx, :2]
    objects[: len(idx), 3] = 1.0
    s = cell.read()
    gantry = np.empty(8, np.float32)
    gantry[:3], gantry[3:6] = s.pos, s.vel
    gantry[6], gantry[7] = s.tool, float(s.holding)
    held = np.float32([p.slot_class[cell.held] if cell.held >= 0 else -1])
    return {
        "objects": objects,
        "gantry": gantry,
        "held": held,
        "instruction": cell.instruction.astype(np.int32),
    }


def instruction_id(instruction: np.ndarray) -> int:
    """Lexicographic index of the permutation (0 .. C!-1): one int that names the task,
    e.g. a key for the inference node's instruction-prefix KV cache."""
    perm, rest, idx = [int(v) for v in instruction], sorted(int(v) for v in instruction), 0
    for i, v in enumerate(perm):
        r = rest.index(v)
        idx = idx * (len(perm) - i) + r
        rest.pop(r)
    return idx


def obs_body(obs: dict[str, np.ndarray]) -> dict:
    """The `obs` wire body (see rtinfer.transport.wire): arrays in "values", scalars in "ints",
    camera frames (obs["frames"]: name -> (uint8 image, capture ns)) in "frames"."""
    body = {
        "values": {
            "objects": obs["objects"],
            "gantry": obs["gantry"],
            "held": obs["held"],
            "instruction": obs["instruction"],
        },
        "ints": {"instruction_id": instruction_id(obs["instruction"])},
    }
    if "frames" in obs:
        body["frames"] = {
            name: {"image": image, "capture_ns": int(capture_ns)}
            for name, (image, capture_ns) in obs["frames"].items()
        }
    return body


def obs_from_body(body: dict) -> dict[str, np.ndarray]:
    """Inverse of obs_body (arrays copied to the canonical dtypes)."""
    v = body["values"]
    return {
        "objects": np.asarray(v["objects"], np.float32),
        "gantry": np.asarray(v["gantry"], np.float32),
        "held": np.asarray(v["held"], np.float32),
        "instruction": np.asarray(v["instruction"], np.int32),
    }
