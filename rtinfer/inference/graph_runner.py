"""GraphRunner: observation -> one continuous action chunk, for a ChunkModelDir.

One ONNX Runtime session per budget level, opened at load and checked against the
directory's contract (rtinfer.model.chunk_model): its inputs are exactly obs_spec.json's
keys, dtypes and [1, *shape]s, its one output `actions` is float32 [1, horizon, D]. Each
session has an IOBinding whose output is bound once to a preallocated numpy buffer, so a
cycle allocates no output; inputs are bound per cycle from the observation's own arrays
(views, no copy). The chunk exists all at once (rtinfer.inference.policy.GraphPolicy stamps
first_token_ns when the graph returned and streams every waypoint right after). Not
thread-safe.
"""

from __future__ import annotations

import numpy as np

from rtinfer.inference.backends.base import BackendError
from rtinfer.inference.budget import BudgetLevel
from rtinfer.model.chunk_model import OUTPUT, ChunkModelDir


def chunk_levels(model: ChunkModelDir) -> list[BudgetLevel]:
    """One BudgetLevel per graph; its `depth` is the level's graph index (no speculation,
    the whole horizon)."""
    return [
        BudgetLevel(g["level"], 0, model.action.horizon, model.accuracy(g["level"]))
        for g in model.levels
    ]


class GraphRunner:
    def __init__(self, model: ChunkModelDir, *, threads: int = 1, spin: bool | None = None):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise BackendError(
                f"onnxruntime is not installed ({e}); pip install onnxruntime"
            ) from None
        self.model, self.counters = model, {}
        a = model.action
        self.out = [np.zeros((1, a.horizon, a.dim), np.float32) for _ in model.levels]
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = int(threads), 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if spin is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self._sessions, self._bind = [], []
        for g, out in zip(model.levels, self.out):
            path = model.graph_path(g["level"])
            try:
                sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            except Exception as e:  # ORT raises its own types for unreadable graphs
                raise BackendError(
                    f"{path}: ONNX Runtime cannot load it ({str(e)[:200]}); re-package the model"
                ) from None
            problems = graph_problems(sess, model)
            if problems:
                raise BackendError(f"{path}: " + "; ".join(problems))
            bind = sess.io_binding()
            bind.bind_output(OUTPUT, "cpu", 0, np.float32, out.shape, out.ctypes.data)
            self._sessions.append(sess)
            self._bind.append(bind)

    def reset(self) -> None:
        """No state is kept across cycles."""

    def run(self, feeds: dict[str, np.ndarray], level: int = 0) -> np.ndarray:
        """The chunk [horizon, D] at `level` (a view of this level's output buffer)."""
        bind = self._bind[level]
        for key, arr in feeds.items():
            bind.bind_cpu_input(key, arr)
        self._sessions[level].run_with_iobinding(bind)
        return self.out[level][0]


def zero_feeds(model: ChunkModelDir) -> dict[str, np.ndarray]:
    """An all-zero observation's graph inputs."""
    o = model.obs
    return {k: np.zeros((1, *s), d) for k, d, s in zip(o.keys, o.dtypes, o.shapes)}


class FeedInputs:
    """The input side a policy over obs_spec graphs shares (the continuous-chunk and the flow
    kinds): an `obs` body -> its graph feeds, an all-zero observation's feeds, batches of one.
    The policy keeps its model directory in `self.model`."""

    model: ChunkModelDir

    def encode(self, body: dict):
        return self.model.obs.feeds(body)

    def sample_inputs(self):
        return zero_feeds(self.model)

    def batch_for(self, n: int) -> int:
        return 1


def dry_run_problems(model: ChunkModelDir) -> list[str]:
    """Open every level as the node does and run it once on an all-zero observation: one
    line per problem with its fix (empty: none). `rtinfer check-model` and `rtinfer package`
    both check a directory this way."""
    try:
        runner = GraphRunner(model)
    except BackendError as e:
        return [str(e)]
    zeros = zero_feeds(model)
    return [
        f"{model.graph_path(level)}: the chunk for an all-zero observation is not finite; "
        f"check the graph's normalisation"
        for level in range(len(model.levels))
        if not np.isfinite(runner.run(zeros, level)).all()
    ]


def graph_problems(sess, model: ChunkModelDir) -> list[str]:
    """Where a loaded graph breaks the contract: one line each with the fix (empty: none)."""
    out = input_problems(sess, model.obs)
    outs = sess.get_outputs()
    a = model.action
    shape = [1, a.horizon, a.dim]
    if [o.name for o in outs] != [OUTPUT]:
        out.append(f"graph outputs {[o.name for o in outs]}; the contract is one output {OUTPUT!r}")
    elif outs[0].type != ort_type("float32") or list(outs[0].shape) != shape:
        out.append(
            f"output {OUTPUT!r} is {outs[0].type} {outs[0].shape}; action_spec.json "
            f"says float32 {shape} (horizon x names): export the graph to return "
            f"that, one column per name {list(a.names)} in order, or make "
            f"action_spec.json's horizon and names match the graph"
        )
    return out


def input_problems(sess, obs) -> list[str]:
    """Where a loaded graph's inputs break obs_spec.json (keys, dtypes, [1, *shape]s): one
    line each with the fix (empty: none)."""
    want = obs.graph_inputs()
    got = {i.name: i for i in sess.get_inputs()}
    out = []
    for key in sorted(set(got) - set(want)):
        out.append(
            f"graph input {key!r} is not in obs_spec.json; add it there or remove it from the graph"
        )
    for key, (dtype, shape) in want.items():
        i = got.get(key)
        if i is None:
            out.append(
                f"obs_spec.json input {key!r} is not a graph input; name the graph's "
                f"inputs after the observation keys"
            )
        elif i.type != ort_type(dtype) or list(i.shape) != list(shape):
            out.append(
                f"graph input {key!r} is {i.type} {i.shape}; obs_spec.json says "
                f"{dtype} {list(shape)}: export with static shapes and these dtypes"
            )
    return out


# numpy dtype name -> ORT's, where they differ
_ORT_NAMES = {"float32": "float", "float64": "double"}


def ort_type(dtype: str) -> str:
    """ONNX Runtime's tensor type string of a numpy dtype name: "float32" -> "tensor(float)"."""
    return f"tensor({_ORT_NAMES.get(dtype, dtype)})"


def numpy_dtype(ort_tensor_type: str) -> str:
    """The numpy dtype name of an ONNX Runtime tensor type string (ort_type's inverse)."""
    name = ort_tensor_type[len("tensor(") : -1]
    return next((np_name for np_name, ort in _ORT_NAMES.items() if ort == name), name)
