"""A distilled plan drafter: chunk reuse's plan, corrected by a small MLP that learned the
target's own greedy chunks.

`ChunkReuseDrafter` drafts the previous chunk shifted in time (refined by every verify).
`PlanDrafter` keeps that plan and asks a two-layer MLP, trained on the target policy's
greedy chunks over recorded observations (`python -m models.distil_plan`), how far each
drafted bin is from what the target will say: one of 2R+1 offsets per token, or (with
`top` set) either end of the bins, which a suction flip jumps to. It reads
the observation tokens, the instruction, the plan and which tokens are already final, so
one call drafts the whole window. It runs in numpy (about 70k multiply-adds, tens of
microseconds): a separate draft model's ONNX Runtime step costs a third of the target's
on a small policy (per-node overhead), which ate its higher acceptance. The target's
verify still decides every token, so greedy output stays token-identical to plain greedy;
the drafts are deterministic (one-hot for the rejection rule) when sampling.

Weights (`PlanMLP.load`): an .npz with w0, b0, w1, b1, w2, b2 (input x hidden, hidden x
hidden, hidden x chunk_tokens * (2R+1)) and `meta`, a JSON string: chunk_tokens, dim,
obs_length, instr_length, instr_classes, radius (R), top (the highest bin; 0: no end
classes), anchors (for the first dimensions of
a waypoint, the observation token that holds the same quantity in the same bins: the
gantry's x, y, z on the conveyor cell), target (the policy it was distilled from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rtinfer.inference.drafters import ChunkReuseDrafter, DraftContext, OnChunkReuse


@dataclass(frozen=True)
class PlanShape:
    """What the MLP was trained on (the weights file's `meta`)."""

    chunk_tokens: int
    dim: int
    obs_length: int
    instr_length: int
    instr_classes: int
    radius: int
    anchors: tuple[int, ...]
    target: str = ""
    top: int = 0  # > 0: two more classes per token, bin 0 and bin `top`

    @property
    def classes(self) -> int:
        """Outputs per token: the offsets -R..R, then bin 0 and bin top where top > 0."""
        return 2 * self.radius + 1 + 2 * (self.top > 0)

    @classmethod
    def from_meta(cls, meta: dict) -> PlanShape:
        return cls(**{**meta, "anchors": tuple(meta["anchors"])})

    def as_meta(self) -> dict:
        return {**self.__dict__, "anchors": list(self.anchors)}


def features(
    shape: PlanShape, obs: np.ndarray, instr: np.ndarray, plan: np.ndarray, index: np.ndarray
) -> np.ndarray:
    """(rows, F) float32 MLP inputs: observation bins, instruction one-hot, plan bins, which
    plan tokens are final, each anchored dimension's plan bin against the observation's,
    and each waypoint's step from the one before. obs (rows, L), instr (rows, C), plan
    (rows, chunk_tokens) bins, index (rows,): tokens of the chunk already final."""
    obs, plan = np.asarray(obs, np.float32), np.asarray(plan, np.float32)
    rows, n, d, c = len(plan), shape.chunk_tokens, shape.dim, shape.instr_classes
    onehot = np.zeros((rows, shape.instr_length * c), np.float32)
    onehot[np.arange(rows)[:, None], np.arange(shape.instr_length) * c + instr] = 1.0
    final = (np.arange(n)[None] < np.asarray(index)[:, None]).astype(np.float32)
    wp = plan.reshape(rows, n // d, d)
    a = len(shape.anchors)
    rel = np.clip((wp[:, :, :a] - obs[:, None, list(shape.anchors)]) / 32.0, -4, 4)
    step = np.clip((wp[:, 1:] - wp[:, :-1]) / 16.0, -4, 4)
    return np.concatenate(
        [obs / 255.0, onehot, plan / 255.0, final, rel.reshape(rows, -1), step.reshape(rows, -1)],
        axis=1,
        dtype=np.float32,
    )


class PlanMLP:
    """The trained model: features and the plan -> (rows, chunk_tokens) drafted bins."""

    def __init__(self, shape: PlanShape, weights: list, biases: list):
        self.shape = shape  # C order float32: a Fortran-order weight matmuls 3x slower
        self.w = [np.ascontiguousarray(w, np.float32) for w in weights]
        self.b = [np.ascontiguousarray(b, np.float32) for b in biases]
        out = shape.chunk_tokens * shape.classes
        if weights[-1].shape[1] != out:
            raise ValueError(
                f"plan drafter: output width {weights[-1].shape[1]}, its meta "
                f"says {out} ({shape.chunk_tokens} tokens x {shape.classes})"
            )

    @classmethod
    def load(cls, path: str | Path) -> PlanMLP:
        with np.load(path, allow_pickle=False) as z:
            shape = PlanShape.from_meta(json.loads(str(z["meta"])))
            return cls(shape, [z[f"w{i}"] for i in range(3)], [z[f"b{i}"] for i in range(3)])

    def save(self, path: str | Path) -> None:
        np.savez(
            path,
            meta=np.array(json.dumps(self.shape.as_meta())),
            **{f"w{i}": w for i, w in enumerate(self.w)},
            **{f"b{i}": b for i, b in enumerate(self.b)},
        )

    def bins(self, x: np.ndarray, plan: np.ndarray, n_bins: int) -> np.ndarray:
        """(rows, chunk_tokens) drafted bins for features x and the plan they were made of."""
        h = np.maximum(x @ self.w[0] + self.b[0], 0.0)
        h = np.maximum(h @ self.w[1] + self.b[1], 0.0)
        s = self.shape
        logits = (h @ self.w[2] + self.b[2]).reshape(len(x), s.chunk_tokens, s.classes)
        return self.shape_bins(logits.argmax(-1), np.asarray(plan, np.int64), n_bins)

    def shape_bins(self, cls: np.ndarray, plan: np.ndarray, n_bins: int) -> np.ndarray:
        """Classes -> bins: plan + offset, or an end of the bins; clipped to [0, n_bins)."""
        r = self.shape.radius
        out = np.clip(plan + cls - r, 0, n_bins - 1)
        out[cls == 2 * r + 1] = 0
        out[cls == 2 * r + 2] = self.shape.top
        return out


class PlanFeatures:
    """The plan's share of the MLP's inputs for one row, as `features` computes them, in
    preallocated buffers: the plan / 255, which tokens are final, each anchored dimension
    against the observation's (`anchor`, set per cycle), each waypoint's step; the last two
    scaled and clipped in one pass."""

    def __init__(self, shape: PlanShape, width: int):
        n, d, a = shape.chunk_tokens, shape.dim, len(shape.anchors)
        self.dim, self.anchored = d, a
        self.anchor = np.zeros(a, np.float32)
        self.x = np.zeros(width, np.float32)
        self._plan = np.zeros(n, np.float32)
        self._final = self.x[n : 2 * n]
        self._rel = self.x[2 * n : 2 * n + n // d * a].reshape(n // d, a)
        self._step = self.x[2 * n + n // d * a :].reshape(n // d - 1, d)
        self._tail = self.x[2 * n :]
        self._scale = np.concatenate(
            [np.full(self._rel.size, 1 / 32.0), np.full(self._step.size, 1 / 16.0)]
        ).astype(np.float32)

    def fill(self, plan: np.ndarray, index: int) -> np.ndarray:
        """x for the plan (bins, chunk_tokens) with tokens [0, index) final."""
        p = self._plan
        p[:] = plan
        np.divide(p, np.float32(255.0), out=self.x[: len(p)])
        self._final[:index], self._final[index:] = 1.0, 0.0
        wp = p.reshape(-1, self.dim)
        np.subtract(wp[:, : self.anchored], self.anchor, out=self._rel)
        np.subtract(wp[1:], wp[:-1], out=self._step)
        t = np.multiply(self._tail, self._scale, out=self._tail)
        np.minimum(np.maximum(t, -4.0, out=t), 4.0, out=t)
        return self.x


class PlanDrafter(OnChunkReuse):
    """Chunk reuse's drafts moved by the MLP's offsets. `start(prefix)` reads the cycle's
    instruction and observation from its prefix (rtinfer.model.sequence layout) before the
    decode; the caller drives `reuse` (set_previous / clear) as for chunk reuse alone.

    A draft computes what `features` and `PlanMLP.bins` would, for one row, in
    preallocated buffers: the observation's and instruction's share of the first layer
    once per cycle (in `start`), the plan's (`PlanFeatures`) per draft, and the last layer
    only for the tokens drafted, its classes to bins in plain Python (32 us a draft on the
    2-core host at load 2-4, warm, against 45 us with numpy calls for both, and 75 us
    through the batch path)."""

    name = "plan"

    def __init__(self, reuse: ChunkReuseDrafter, mlp: PlanMLP, vocab):
        super().__init__(reuse)
        s = mlp.shape
        if (reuse.horizon * reuse.dim, reuse.dim) != (s.chunk_tokens, s.dim):
            raise ValueError(
                f"plan drafter: trained for chunks of {s.chunk_tokens} tokens "
                f"({s.dim} a waypoint), the policy's are "
                f"{reuse.horizon * reuse.dim} ({reuse.dim})"
            )
        self.mlp, self.vocab = mlp, vocab
        self._instr = np.zeros((1, s.instr_length), np.int64)
        self._obs = np.zeros((1, s.obs_length), np.int64)
        fixed = s.obs_length + s.instr_length * s.instr_classes  # rows of w0 set per cycle
        self._w0_fixed, self._w0_plan = mlp.w[0][:fixed], mlp.w[0][fixed:]
        self._w2t = np.ascontiguousarray(mlp.w[2].T)  # (tokens x offsets, hidden)
        self._h0 = np.zeros(mlp.w[0].shape[1], np.float32)
        self._fixed = np.zeros(fixed, np.float32)  # observation / 255, instruction one-hot
        self._hot = s.obs_length + np.arange(s.instr_length) * s.instr_classes
        self._anchors = np.array(s.anchors, np.int64)
        self._features = PlanFeatures(s, self._w0_plan.shape[0])
        self._hidden = tuple(np.zeros(w.shape[1], np.float32) for w in mlp.w[:2])

    def start(self, prefix: np.ndarray) -> None:
        """This cycle's prefix ([BOS][instruction][observation][SEP], vocab ids)."""
        c, n_obs, v = self._instr.shape[1], self._obs.shape[1], self.vocab
        if len(prefix) != c + n_obs + 2:
            raise ValueError(
                f"plan drafter: prefix of {len(prefix)} tokens, trained on "
                f"{c} instruction and {n_obs} observation tokens"
            )
        np.subtract(prefix[1 : 1 + c], v.instr_start, out=self._instr[0])
        np.subtract(prefix[1 + c : 1 + c + n_obs], v.obs_start, out=self._obs[0])
        f = self._fixed  # as `features` writes it: float32 bins / 255, then the one-hot
        f[:n_obs] = self._obs[0]
        np.divide(f[:n_obs], np.float32(255.0), out=f[:n_obs])
        f[n_obs:] = 0.0
        f[self._hot + self._instr[0]] = 1.0
        np.add(f @ self._w0_fixed, self.mlp.b[0], out=self._h0)
        self._features.anchor[:] = self._obs[0, self._anchors]

    def draft(self, ctx: DraftContext, k: int) -> np.ndarray:
        self.q = None
        drafts = self.reuse.draft(ctx, k)  # a view of the reuse plan
        g = len(drafts)
        if g == 0:
            return drafts
        i, s, (h, h1) = ctx.index, self.mlp.shape, self._hidden
        x = self._features.fill(self.reuse.plan, i)
        np.add(self._h0, np.matmul(x, self._w0_plan, out=h), out=h)
        np.maximum(h, 0.0, out=h)
        np.add(np.matmul(h, self.mlp.w[1], out=h1), self.mlp.b[1], out=h1)
        np.maximum(h1, 0.0, out=h1)
        rows = slice(i * s.classes, (i + g) * s.classes)
        logits = (self._w2t[rows] @ h1 + self.mlp.b[2][rows]).reshape(g, s.classes)
        # written into the plan: re-anchoring measures a miss from what was drafted.
        # PlanMLP.shape_bins for at most a window of tokens, in plain Python (its numpy
        # calls cost more than the arithmetic on a few values)
        rad, lo, hi, top = s.radius, 2 * s.radius + 1, self.vocab.n_action_bins - 1, s.top
        plan = drafts.tolist()
        for j, c in enumerate(logits.argmax(1).tolist()):
            if c < lo:
                v = plan[j] + c - rad
                plan[j] = 0 if v < 0 else hi if v > hi else v
            else:
                plan[j] = 0 if c == lo else top
        drafts[:] = plan
        return drafts
