"""What a flow runner (ONNX Runtime's FlowRunner, TensorRT's FlowTrtRunner) shares at the edges
of a cycle, in numpy on the host: the initial noise, and the way between the model's units and
the action spec's (the manifest's affine: physical = x * scale + offset; the spec's limits).

start_noise fills the cycle's x from a seed, a given array, or zeros where zero_noise_ok.
ActionOut holds the affine per waypoint and the chunk buffer: chunk_of(x) is the chunk served
(clipped to the limits; NaN stays NaN, so the node drops a chunk that is not finite), and
to_model(committed, out) puts committed waypoints into model units. Buffers are allocated
once; neither allocates per cycle. Not thread-safe.
"""

from __future__ import annotations

import numpy as np

from rtinfer.model.flow_model import FlowModelDir


def start_noise(
    model: FlowModelDir, out: np.ndarray, seed=None, noise: np.ndarray | None = None
) -> None:
    """out (the runner's x on the host) <- noise [1, H_m, D_m] when given, else N(0, 1) from
    PCG64 seeded with SeedSequence(seed), else zeros (ValueError unless zero_noise_ok)."""
    if noise is not None:
        if np.size(noise) != out.size:
            raise ValueError(
                f"noise of shape {list(np.shape(noise))}; give the step "
                f"graphs' x_t shape {list(out.shape)}"
            )
        np.copyto(out, np.asarray(noise, np.float32).reshape(out.shape))
    elif seed is not None:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
        rng.standard_normal(dtype=np.float32, out=out)
    elif model.zero_noise_ok:
        out.fill(0.0)
    else:
        raise ValueError(
            f"{model.path}: zero noise asked but graphs.json's zero_noise_ok is false; pass a seed"
        )


class ActionOut:
    def __init__(self, model: FlowModelDir, h_m: int, d_m: int, clip: bool = True):
        a, self.clip = model.action, clip
        self.scale = np.ones((h_m, d_m), np.float32)
        self.offset = np.zeros((h_m, d_m), np.float32)
        aff = model.affine()
        if aff is not None:
            self.scale[...], self.offset[...] = aff
        self.physical = np.zeros((h_m, d_m), np.float32)
        self.chunk = np.zeros((a.horizon, a.dim), np.float32)
        # full [H, D] limits: numpy 2.4's maximum(out=) against a broadcast [D] row
        # allocated a chunk-sized temporary (tracemalloc)
        self.low = np.ascontiguousarray(np.broadcast_to(np.float32(a.low), self.chunk.shape))
        self.high = np.ascontiguousarray(np.broadcast_to(np.float32(a.high), self.chunk.shape))

    def chunk_of(self, x0: np.ndarray) -> np.ndarray:
        """The chunk [H, D] in action units for x0 [H_m, D_m] in model units (one buffer,
        valid until the next call)."""
        H, D = self.chunk.shape
        np.multiply(x0, self.scale, out=self.physical)
        np.add(self.physical, self.offset, out=self.physical)
        if self.clip:  # maximum/minimum keep NaN (np.clip(out=) allocated two chunks here)
            np.maximum(self.physical[:H, :D], self.low, out=self.chunk)
            np.minimum(self.chunk, self.high, out=self.chunk)
        else:
            np.copyto(self.chunk, self.physical[:H, :D])
        return self.chunk

    def to_model(self, values: np.ndarray, out: np.ndarray) -> None:
        """out (n, D) <- values (n, D) in action units, in model units (waypoints 0..n-1)."""
        n, D = len(values), self.chunk.shape[1]
        np.subtract(values, self.offset[:n, :D], out=out)
        np.divide(out, self.scale[:n, :D], out=out)
