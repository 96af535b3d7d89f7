"""A recorded observation stream of obs *bodies* (a model directory's `obs_stream.npz`).

Row i is the `obs` wire body of the i-th observation, one policy period after row i - 1:
array `values.<field>` (N, ...) holds row i's values[field], array `ints.<field>` (N,) its
ints[field]. Written by the task that records it (the conveyor cell's:
examples.conveyor_sorting.record_obs_stream); replayed by benchmarks (`rtinfer bench fleet`)
without importing the task. numpy only: robot-safe.
"""

from __future__ import annotations

import numpy as np

FILE = "obs_stream.npz"


def load_bodies(path) -> list[dict]:
    """The obs bodies of the stream at `path`, one dict per row (views of its arrays)."""
    with np.load(path, allow_pickle=False) as z:
        cols = {k: z[k] for k in z.files}
    if not cols or any(not (k.startswith("values.") or k.startswith("ints.")) for k in cols):
        raise ValueError(
            f"{path}: not an obs body stream (arrays values.<field> and "
            f"ints.<field>, got {sorted(cols)})"
        )
    values = {k[7:]: v for k, v in cols.items() if k.startswith("values.")}
    ints = {k[5:]: v for k, v in cols.items() if k.startswith("ints.")}
    rows = len(next(iter(cols.values())))
    return [
        {
            "values": {k: v[i] for k, v in values.items()},
            "ints": {k: int(v[i]) for k, v in ints.items()},
        }
        for i in range(rows)
    ]
