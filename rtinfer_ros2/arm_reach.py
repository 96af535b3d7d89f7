"""What the shipped reach policy (models/zoo/arm-reach-bc, examples/arm_reach) sees, built from
a ROS 2 arm's joint states: the bridge's `observe` for that policy.

The policy's observation (examples/arm_reach/observe.py): `joints` float32 (2N,) = positions
then velocities, `ee` float32 (3,) = the hand tip (m) by forward kinematics, `target` float32
(3,) = the point to reach (m), given here as data (the bridge's `observe_args: {target: ...}`).
The kinematics are the reach arm's (examples/arm_reach/scene.py ArmGeometry: a yaw base, then
three pitch joints), in closed form so that the ROS side needs no simulator.
"""

from __future__ import annotations

import math

import numpy as np

COLUMN_M = 0.04 + 0.12  # table top -> first pitch joint (base_height + lengths[0])
LINKS_M = (0.30, 0.25, 0.10)  # pitch joint -> next joint, the last to the tip


def tip(q) -> np.ndarray:
    """The hand tip (x, y, z) in m at joint angles q (base yaw, then the pitch joints)."""
    r, z, phi = 0.0, COLUMN_M, 0.0
    for qi, length in zip(q[1:], LINKS_M):
        phi += qi
        r += length * math.sin(phi)
        z += length * math.cos(phi)
    return np.array([r * math.cos(q[0]), r * math.sin(q[0]), z])


def observe(pos: np.ndarray, vel: np.ndarray, target=(0.35, 0.0, 0.1)) -> dict[str, np.ndarray]:
    """The policy's observation values from the joints' positions and velocities (rad, rad/s)."""
    return {
        "joints": np.concatenate([pos, vel]).astype(np.float32),
        "ee": tip(pos).astype(np.float32),
        "target": np.asarray(target, np.float32),
    }
