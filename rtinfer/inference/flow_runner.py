"""FlowRunner: observation -> one continuous action chunk, for a FlowModelDir, on ONNX Runtime.

Per cycle: the prefix graph runs once on the observation; then the level's step graph runs
K times, each step feeding the noisy chunk x_t and the time t and updating x_t from the
output v by the integrator's plan (rtinfer.inference.flow_schedule: Euler or DDIM). The
chunk served is x[0, :H, :D] * scale + offset, clipped to the action spec's limits (NaN
stays NaN: the node drops a chunk that is not finite).

Every buffer is allocated once at load: the prefix outputs, x_t, t (per step graph), v, the
integrator's scratch and the chunk. The prefix binds its outputs to the prefix buffers, and
each step graph binds those same buffers, x_t, t and v once (I/O binding, numpy memory
shared with ONNX Runtime on the CPU): a step writes t in place, runs, and updates x in place,
so the step loop allocates nothing. The step graphs' inputs are checked at load against the
prefix outputs (name, shape, dtype) and x_t/t/v against the action spec (flow_check); a
mismatch is one BackendError line naming both shapes and the fix.

Noise: x starts as N(0, 1) float32 from numpy's PCG64 seeded with SeedSequence(seed) (the
policy passes (node seed, robot, seq), so a run replays), or an array the caller gives
(parity tests), or zeros where the manifest's zero_noise_ok allows it.
Committed waypoints (real-time chunking): with a per-waypoint t [1, H_m] step graph,
run(..., committed=(n, D) array in action units) feeds the first n waypoints clean at t = 0
in every step and keeps them there (training-time conditioning, arXiv 2512.05964).
Not thread-safe.
"""

from __future__ import annotations

import numpy as np

from rtinfer.inference.backends.base import BackendError
from rtinfer.inference.flow_action import ActionOut, start_noise
from rtinfer.inference.flow_check import T, V, X, flow_problems
from rtinfer.inference.flow_schedule import plan
from rtinfer.inference.graph_runner import numpy_dtype, zero_feeds
from rtinfer.model.flow_model import FlowModelDir


class FlowContractError(BackendError):
    """The graphs break the flow contract: the first problem is the message, `problems`
    lists every one (one line each, with the fix)."""

    def __init__(self, problems: list[str]):
        super().__init__(problems[0])
        self.problems = problems


class FlowRunner:
    def __init__(
        self, model: FlowModelDir, *, threads: int = 1, spin: bool | None = None, clip: bool = True
    ):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise BackendError(
                f"onnxruntime is not installed ({e}); pip install onnxruntime"
            ) from None
        self.model = model
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = int(threads), 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if spin is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self.prefix = _open(ort, model.prefix_path, so)
        self.steps = [_open(ort, p, so) for p in model.step_paths]
        problems = flow_problems(self.prefix, self.steps, model)
        if problems:
            raise FlowContractError(problems)
        self._buffers(clip)
        self.plans = [plan(model, lv["steps"]) for lv in model.levels]

    def _buffers(self, clip: bool) -> None:
        self.cache = {
            o.name: np.zeros(o.shape, numpy_dtype(o.type)) for o in self.prefix.get_outputs()
        }
        x_in = next(i for i in self.steps[0].get_inputs() if i.name == X)
        self.h_m, self.d_m = x_in.shape[1], x_in.shape[2]
        self.x = np.zeros((1, self.h_m, self.d_m), np.float32)
        self.v = np.zeros_like(self.x)
        self.scratch = (np.zeros_like(self.x), np.zeros_like(self.x))
        self.t = [
            np.zeros(
                next(i for i in s.get_inputs() if i.name == T).shape,
                numpy_dtype(next(i for i in s.get_inputs() if i.name == T).type),
            )
            for s in self.steps
        ]
        self.per_waypoint = [t.shape == (1, self.h_m) for t in self.t]
        self.committed = np.zeros((self.h_m, self.d_m), np.float32)
        self.out = ActionOut(self.model, self.h_m, self.d_m, clip)  # affine, limits, chunk
        self._prefix_bind = self.prefix.io_binding()
        for name, buf in self.cache.items():
            self._prefix_bind.bind_output(name, "cpu", 0, buf.dtype, buf.shape, buf.ctypes.data)
        self._step_bind = []
        for s, t in zip(self.steps, self.t):
            bind = s.io_binding()
            for i in s.get_inputs():
                buf = self.x if i.name == X else t if i.name == T else self.cache[i.name]
                bind.bind_input(i.name, "cpu", 0, buf.dtype, buf.shape, buf.ctypes.data)
            bind.bind_output(V, "cpu", 0, np.float32, self.v.shape, self.v.ctypes.data)
            self._step_bind.append(bind)

    def reset(self) -> None:
        """No state is kept across cycles."""

    def run(
        self,
        feeds: dict[str, np.ndarray],
        level: int = 0,
        *,
        seed=None,
        noise: np.ndarray | None = None,
        committed: np.ndarray | None = None,
    ) -> np.ndarray:
        """The chunk [H, D] float32 in action units at `level` (a view of one buffer, valid
        until the next run). seed: ints for SeedSequence (the noise); noise: the initial x
        [1, H_m, D_m] instead; neither: zero noise (ValueError unless zero_noise_ok).
        committed: (n, D) waypoints in action units to condition on (per-waypoint t only)."""
        self.start(seed, noise)
        self.encode(feeds)
        return self.integrate(level, committed)

    def start(self, seed=None, noise: np.ndarray | None = None) -> None:
        """Set x to the cycle's initial noise (see run)."""
        start_noise(self.model, self.x, seed, noise)

    def encode(self, feeds: dict[str, np.ndarray]) -> None:
        """Run the prefix once on the observation's graph inputs (views, no copy)."""
        for key, arr in feeds.items():
            self._prefix_bind.bind_cpu_input(key, arr)
        self.prefix.run_with_iobinding(self._prefix_bind)

    def integrate(self, level: int, committed: np.ndarray | None = None) -> np.ndarray:
        """K steps of `level` from the current x; the chunk (see run)."""
        g = self.model.levels[level]["graph"]
        p, t, sess, bind = self.plans[level], self.t[g], self.steps[g], self._step_bind[g]
        n = self._commit(committed, g)
        for i in range(len(p.times)):
            if n:
                t[0, n:] = p.times[i]
                self.x[0, :n] = self.committed[:n]
            else:
                t[...] = p.times[i]
            sess.run_with_iobinding(bind)
            p.step(i, self.x, self.v, self.scratch)
        if n:
            self.x[0, :n] = self.committed[:n]
        return self.out.chunk_of(self.x[0])

    def _commit(self, committed, g: int) -> int:
        if committed is None or len(committed) == 0:
            return 0
        n, D = len(committed), self.model.action.dim
        if not self.per_waypoint[g] or self.model.integrator != "euler":
            raise ValueError(
                f"{self.model.step_paths[g]}: conditioning on committed waypoints "
                f"needs an euler step graph with per-waypoint t [1, {self.h_m}]; "
                f"this one takes t {list(self.t[g].shape)}"
            )
        if n > self.h_m or np.shape(committed)[1:] != (D,):
            raise ValueError(
                f"committed waypoints of shape {list(np.shape(committed))}; give "
                f"(n, {D}) with n <= {self.h_m}"
            )
        self.committed[:n] = 0.0
        self.out.to_model(committed, self.committed[:n, :D])
        self.t[g][0, :n] = 0.0
        return n


def _open(ort, path, so):
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own types for unreadable graphs
        raise BackendError(
            f"{path}: ONNX Runtime cannot load it ({str(e)[:200]}); re-package the model"
        ) from None


def dry_run_problems(model: FlowModelDir) -> list[str]:
    """Open the prefix and step graphs as the node does and run every level once on an
    all-zero observation from seeded noise: one line per problem with its fix (empty: none).
    `rtinfer check-model` and package_flow check a directory this way."""
    try:
        runner = FlowRunner(model)
    except FlowContractError as e:
        return e.problems
    except BackendError as e:
        return [str(e)]
    zeros = zero_feeds(model)
    return [
        f"{model.step_paths[lv['graph']]}: the chunk at level {lv['level']} for an all-zero "
        f"observation is not finite; check the graphs' normalisation"
        for lv in model.levels
        if not np.isfinite(runner.run(zeros, lv["level"], seed=(0, 0))).all()
    ]
