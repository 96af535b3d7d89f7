"""Policies: each kind of model behind one small surface, so the node never asks which it holds.

    policy = load_policy(model_dir, cfg, backend_opts, endpoints)
    policy.levels            its budget levels, full quality first
    policy.batches           the batch sizes it runs ([1], or [1, 2, ...] where it batches)
    policy.encode(body)      an `obs` body -> its inputs (WireError: the body does not fit)
    policy.run(jobs, emit)   one chunk per job (cycle, inputs), all at jobs[0]'s level
    policy.figures()         its counters, for the node's health
    policy.max_committed     the most committed waypoints it conditions a chunk on (real-
                             time chunking; 0: it cannot condition, docs/wire.md)

run sets each cycle's first_token_ns before its first emit(cycle, first, values, tokens)
(waypoints first.. of the chunk, values (n, D) float32 and tokens (n, D) int32 or None, the
moment they are final), and replaces cycle.previous with the chunk it computed. A single
robot is a batch of one: the policy decides how it runs it.

Kinds:
- TokenPolicy: an action-token policy (KV-step graphs: speculative decoding, exits, gates,
  any backend). One row decodes through runner.TokenRunner; several, where the model ships
  batched graphs and the setup batches (greedy fp32 ONNX Runtime, drafter chunk or none),
  through batch.BatchRunner, each row token-identical to its own decode.
- GraphPolicy: a continuous-chunk policy (one-shot graphs: observation -> [H, D], one per
  budget level, graph_runner.GraphRunner). The chunk exists at once; emitted whole.
- FlowPolicy (flow_policy): a flow-matching or diffusion policy (a prefix graph once, then a
  step graph integrated K times from seeded noise; K per budget level). Emitted whole.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rtinfer.inference.batch import BATCH_DRAFTERS, BatchRunner, Row
from rtinfer.inference.budget import default_levels
from rtinfer.inference.flow_policy import FlowPolicy
from rtinfer.inference.graph_runner import FeedInputs, GraphRunner, chunk_levels
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.model.chunk_model import load_model
from rtinfer.model.directory import ModelError
from rtinfer.model.obs_spec import FrameError
from rtinfer.transport.wire import now_ns


class TokenPolicy:
    def __init__(
        self, md, cfg, backend_opts: dict, endpoints: int, *, clock: Callable[[], int] = now_ns
    ):
        opts = {"threads": cfg.threads} if cfg.backend == "onnx" else {}
        self.model = md
        self.runner = TokenRunner(
            md,
            backend=cfg.backend,
            backend_opts={**opts, **backend_opts},
            drafter=cfg.drafter,
            prefix_cache=cfg.prefix_cache,
            sample=cfg.sample,
            temperature=cfg.temperature,
            seed=cfg.seed,
            draft_model=cfg.draft_model,
            clock=clock,
        )
        k_verify = self.runner.decoder.k_verify
        self.levels = default_levels(md, k_verify, gates=self.runner.backend.gates)
        self.max_batch = _max_batch(md, cfg, backend_opts, endpoints)
        self.batcher = (
            None
            if self.max_batch == 1
            else BatchRunner(
                md,
                drafter=cfg.drafter,
                threads=cfg.threads,
                spin=backend_opts.get("spin"),
                k_verify=k_verify,
                clock=clock,
            )
        )
        self.batches = [1] + [b for b in md.batches if b <= self.max_batch]
        self.tokenizer = ActionTokenizer(md.tokenizer)
        self.spec_hash, self.period_ns = md.tokenizer.hash, md.tokenizer.period_ns
        self.start_ns = md.tokenizer.period_ns
        # a forced token prefix conditions any token model; one waypoint at least is its own
        m = md.card.get("max_committed")  # checked at load (rtinfer.model.card)
        self.max_committed = md.tokenizer.horizon - 1 if m is None else m
        self.action_dim = md.tokenizer.dim
        prec = f" {backend_opts['precision']}" if backend_opts.get("precision") else ""
        batch = f", batches of up to {self.max_batch}" if self.batcher is not None else ""
        self.summary = f"{cfg.backend}{prec}, drafter {cfg.drafter}{batch}"
        self._emit = None  # run()'s emit, for the decoders' per-waypoint callback

    def encode(self, body: dict):
        if "frames" in body:
            raise FrameError(
                "frame_unknown",
                f"obs carries frames of camera(s) "
                f"{sorted(body['frames'])[:4]}: an action-token policy takes no "
                f"frames; send them to a continuous-chunk policy with image inputs",
            )
        return self.model.obs.encode(body)  # (instruction tokens, observation tokens)

    def sample_inputs(self):
        """An all-zero observation's inputs (start-up timing)."""
        return np.zeros(self.model.obs.instr_length, np.int64), np.zeros(
            self.model.obs.length, np.int64
        )

    def batch_for(self, n: int) -> int:
        """The batch size n rows run at (1 for one)."""
        return 1 if n == 1 else self.batcher.batch_for(n)

    def run(self, jobs: list, emit=None) -> list[np.ndarray]:
        """Each job's bins (chunk * D,) int64, views valid until the next run."""
        self._emit = emit
        on_bins = self._on_bins if emit is not None else None
        if len(jobs) == 1:
            cycle, (instr, obs) = jobs[0]
            return [self.runner.run_cycle(cycle, instr, obs, on_bins)]
        return self.batcher.run([Row(cycle, *inputs) for cycle, inputs in jobs], on_bins)

    def _on_bins(self, cycle, index: int, bins: np.ndarray) -> None:
        tokens = bins.astype(np.int32)[None]
        self._emit(cycle, index, self.tokenizer.decode(tokens), tokens)

    def figures(self) -> dict:
        """The runner's counters (prefix cache: both runners' summed), the batcher's, each
        drafter's stats as `drafter.stat`."""
        c = dict(self.runner.counters)
        for k, v in (self.batcher.counters if self.batcher is not None else {}).items():
            c[k] = c.get(k, 0) + v
        for name, d in self.runner.drafters.items():
            c.update({f"{name}.{k}": v for k, v in d.stats.items()})
        return c

    def clear_figures(self) -> None:
        """Forget the batches counted so far (the start-up timing's)."""
        if self.batcher is not None:
            self.batcher.counters.update(dict.fromkeys(self.batcher.counters, 0))


def _max_batch(md, cfg, opts: dict, endpoints: int) -> int:
    """The most robots one batch decodes: 1 unless batching applies (batched graphs, ONNX
    Runtime fp32, greedy, a drafter that batches, cfg.batch not 1, and several obs
    endpoints unless cfg.batch asks for it). ModelError: --batch asked where it cannot."""
    if not md.batches or cfg.batch == 1 or (cfg.batch is None and endpoints < 2):
        return 1
    why = (
        "sampling"
        if cfg.sample
        else f"--backend {cfg.backend}"
        if cfg.backend != "onnx"
        else f"--drafter {cfg.drafter}"
        if cfg.drafter not in BATCH_DRAFTERS
        else f"--precision {opts['precision']}"
        if opts.get("precision") not in (None, "fp32", "float32")
        else None
    )
    if why is not None:
        if cfg.batch is not None:
            raise ModelError(
                f"--batch {cfg.batch}: batched decoding is greedy fp32 on ONNX "
                f"Runtime with drafter {' or '.join(BATCH_DRAFTERS)}, not "
                f"{why}; leave --batch out or use --batch 1"
            )
        return 1
    return min(cfg.batch or max(md.batches), max(md.batches))


class GraphPolicy(FeedInputs):
    batches, max_batch = [1], 1
    max_committed = 0  # a one-shot graph takes no committed prefix: the tracker's blend joins

    def __init__(
        self, md, cfg, backend_opts: dict, endpoints: int, *, clock: Callable[[], int] = now_ns
    ):
        if cfg.backend != "onnx":
            raise ModelError(
                f"{md.path}: a continuous-chunk policy runs on ONNX Runtime; "
                f"use --backend onnx (not {cfg.backend})"
            )
        if backend_opts.get("precision"):
            raise ModelError(
                f"--precision {backend_opts['precision']}: a continuous-chunk "
                "policy has one graph per level and no precision sets; leave "
                "--precision out"
            )
        self.model, self.clock = md, clock
        self.runner = GraphRunner(md, threads=cfg.threads, spin=backend_opts.get("spin"))
        self.levels = chunk_levels(md)
        self.spec_hash, self.period_ns = md.action.hash, md.action.period_ns
        self.start_ns, self.action_dim = md.action.start_ns, md.action.dim
        n = len(self.levels)
        self.summary = f"{cfg.backend}, continuous-chunk policy, {n} budget level" + (
            "s"
            if n > 1
            else "; a one-shot graph without alternatives: a shorter chunk "
            "saves no compute, so the budget has nothing cheaper to switch to"
        )

    def run(self, jobs: list, emit=None) -> list[np.ndarray]:
        """Each job's chunk [horizon, D] float32 (a view of its level's output buffer)."""
        out = []
        for cycle, feeds in jobs:
            chunk = self.runner.run(feeds, cycle.level.depth)
            cycle.first_token_ns = self.clock()
            if emit is not None:
                emit(cycle, 0, chunk[: cycle.count], None)
            out.append(chunk)
        return out

    def figures(self) -> dict:
        return {}

    def clear_figures(self) -> None:
        pass


def load_policy(
    model_dir,
    cfg,
    backend_opts: dict | None = None,
    endpoints: int = 1,
    *,
    clock: Callable[[], int] = now_ns,
):
    """The policy object for a model directory of any kind (docs/policies.md), set up
    as cfg (an InferenceNodeConfig) says; endpoints: how many obs endpoints the node has
    (several: batch by default where the model batches). clock: the node's monotonic ns
    clock, which stamps each cycle's first_token. ModelError, BackendError: the directory
    or the setup cannot serve, with the fix."""
    md = load_model(model_dir)
    kind = {"chunk": GraphPolicy, "flow": FlowPolicy}.get(md.kind, TokenPolicy)
    return kind(md, cfg, backend_opts or {}, endpoints, clock=clock)
