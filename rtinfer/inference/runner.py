"""TokenRunner: observation tokens -> one action chunk, the compute core of a policy cycle.

Owns the backend, the decoder, the drafters and the instruction-prefix KV cache, so the
inference node and offline evaluation run exactly the same code. A level with a gate runs
that gated graph set at full depth (the backend built its sessions at load; switching is a
table swap); the instruction prefix is cached per gate, so every level's prefix KV is what
its own graphs compute. A gate the backend did not build (torch, TensorRT) decodes with the
dense graphs instead, counted in counters["gate_fallbacks"]. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from rtinfer.inference.backends import get_backend
from rtinfer.inference.budget import BudgetLevel, prefill_depth
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter, EarlyExitDrafter
from rtinfer.inference.model_drafter import CascadeDrafter, ModelDrafter
from rtinfer.inference.prefix_cache import PrefixCache
from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.model.directory import ModelDir
from rtinfer.model.sequence import instruction_prefix, observation_segment
from rtinfer.transport.wire import now_ns

# the drafters a runner (and so the node) can be given
DRAFTERS = ("chunk", "self", "model", "cascade", "none")
DRAFT_DIR = "draft"  # a model directory's own draft model, when it ships one there


class TokenRunner:
    def __init__(
        self,
        model: ModelDir,
        *,
        backend: str = "onnx",
        backend_opts: dict | None = None,
        drafter: str = "chunk",
        prefix_cache: bool = True,
        sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        draft_model=None,
        clock: Callable[[], int] = now_ns,
    ):
        """drafter: one of DRAFTERS. clock: the monotonic ns clock of the cycle's stamps
        (first_token; the node's own). backend_opts go to Backend.load (of the draft model too).
        "model": a separate draft policy, `draft_model` (a model directory or its path;
        default: the model's own `draft/` folder, else the folder card.json's "draft_model"
        names, relative to the model directory). "cascade": chunk-reuse drafts verified at
        the deepest early exit that has a k_verify graph, then at full depth."""
        if drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {drafter!r}: use one of {', '.join(DRAFTERS)}")
        self.model = md = model
        self.backend = get_backend(backend).load(md, **(backend_opts or {}))
        self.decoder = Decoder(self.backend, sample=sample, temperature=temperature, seed=seed)
        v = md.vocab
        self.drafters = {
            "chunk": ChunkReuseDrafter(md.tokenizer.horizon, md.tokenizer.dim),
            "self": EarlyExitDrafter(min(self.backend.depths), v.action_start, v.action_stop),
        }
        if drafter == "model":
            self.drafters["model"] = self._model_drafter(draft_model, backend, backend_opts)
        elif drafter == "cascade":
            self.drafters["cascade"] = self._cascade_drafter()
        self.drafter, self.prefix_cache, self.clock = drafter, prefix_cache, clock
        self.tokenizer = ActionTokenizer(md.tokenizer)  # committed waypoints -> their tokens
        self.counters = dict.fromkeys(
            ("prefix_prefills", "prefix_hits", "prefix_restores", "gate_fallbacks"), 0
        )
        self._cache, self._instr_key = PrefixCache(self.counters), None
        # run()'s last chunk, (bins (H', D), capture_ns): the chunk-reuse drafter's input
        # offline. run_cycle takes and gives it in the Cycle (the node keeps one per robot).
        self.previous: tuple[np.ndarray, int] | None = None

    def _model_drafter(self, draft_model, backend: str, backend_opts: dict | None) -> ModelDrafter:
        md = self.model
        if draft_model is None:
            named = md.card.get("draft_model")
            draft_model = (
                md.path / DRAFT_DIR
                if (md.path / DRAFT_DIR).is_dir() or not named
                else md.path / named
            )
            if not (draft_model / "graphs.json").is_file():
                raise ValueError(
                    f"drafter 'model' needs a draft model: none at {draft_model}; "
                    f"pass draft_model=DIR, put one in {md.path / DRAFT_DIR} or name "
                    f'it in {md.path / "card.json"} "draft_model"'
                )
        d = ModelDrafter(get_backend(backend).load(draft_model, **(backend_opts or {})))
        d.check_target(md)
        return d

    def _cascade_drafter(self) -> CascadeDrafter:
        be, k = self.backend, self.decoder.k_verify
        exits = [e for e in be.depths if e < be.n_layer and be.has_graph(e, k)]
        if not exits:
            raise ValueError(
                f"{self.model.path}: the cascade drafter needs a k={k} graph at an "
                f"early exit (none in graphs.json); export one "
                f"(rtinfer.bench.dynamic_models.with_graphs) or pick another drafter"
            )
        # with a verify as wide as the chunk a second exit pass pays; with 8 it does not
        # (rtinfer bench dynamic: cascade-k16 against cascade)
        v, rounds = self.model.vocab, 2 if k >= self.model.chunk_tokens else 1
        return CascadeDrafter(
            self.drafters["chunk"], min(exits), v.action_start, v.action_stop, k, rounds
        )

    def reset(self) -> None:
        """Forget the previous chunk (a new episode); the prefix cache stays valid."""
        self.previous = None

    def _prefill(
        self, instr: np.ndarray, obs: np.ndarray, level: BudgetLevel
    ) -> tuple[np.ndarray, int]:
        """The prefix: the instruction (cached, at full depth: every level reuses it) and the
        observation segment at the level's prefill depth (budget.prefill_depth), so a cheap
        level skips the deeper layers in its prefill too."""
        be, v = self.backend, self.model.vocab
        head = instruction_prefix(v, instr)
        if not self.prefix_cache:
            seg = np.concatenate([head, observation_segment(v, obs)])
            return be.prefill(seg, 0), len(seg)
        key = self._cache.key(instr, be.gate)
        if key == self._instr_key:  # already in the KV
            self.counters["prefix_hits"] += 1
        else:
            snap = self._cache.get(key)
            if snap is not None:
                be.restore(snap)
            else:
                be.prefill(head, 0)
                self._cache.put(key, be.snapshot(len(head)))
        self._instr_key = key
        seg = observation_segment(v, obs)
        depth = prefill_depth(level, self.model.n_layer, lambda d: be.has_graph(d, len(seg)))
        return be.prefill(seg, len(head), depth), len(head) + len(seg)

    def run(
        self,
        instr: np.ndarray,
        obs: np.ndarray,
        capture_ns: int | None,
        level: BudgetLevel,
        on_waypoint: Callable[[int, np.ndarray], None] | None = None,
    ) -> tuple[np.ndarray, int]:
        """Offline form of run_cycle: on_waypoint(index, bins); drafts from this runner's own
        previous chunk (self.previous, replaced). Returns (bins, first_token_ns)."""
        cycle = Cycle(0, {}, capture_ns, level, level.chunk, previous=self.previous)
        bins = self._decode(cycle, instr, obs, on_waypoint)
        self.previous = cycle.previous
        return bins, cycle.first_token_ns

    def run_cycle(
        self,
        cycle: Cycle,
        instr: np.ndarray,
        obs: np.ndarray,
        on_waypoint: Callable[[Cycle, int, np.ndarray], None] | None = None,
    ) -> np.ndarray:
        """Decode one chunk of cycle.count waypoints at cycle.level.depth, drafting from
        cycle.previous, starting with cycle.committed's tokens (fed, not sampled) if any;
        sets cycle.first_token_ns before on_waypoint(cycle, index, bins) first fires (once
        per waypoint, the moment it is final; bins is a reused view), then cycle.previous to
        this chunk and cycle.stats. Returns the chunk's bins (chunk * D,)
        int64, a view valid until the next call."""
        return self._decode(cycle, instr, obs, partial(on_waypoint, cycle) if on_waypoint else None)

    def _forced(self, cycle: Cycle) -> np.ndarray | None:
        """The committed prefix's tokens (bins, flat), which the chunk starts with: the
        robot's committed waypoints are bin centres of this tokenizer, so they encode back
        to their own tokens. Marks the prefix used. None: nothing committed."""
        c = cycle.committed
        if c is None:
            return None
        c.used = True
        return self.tokenizer.encode(c.values).reshape(-1)

    def _decode(self, cycle: Cycle, instr: np.ndarray, obs: np.ndarray, on_waypoint) -> np.ndarray:
        md, level, capture_ns = self.model, cycle.level, cycle.capture
        gate = level.gate if level.gate in self.backend.gates else None
        if gate != level.gate:  # a backend without gated sets decodes dense (costlier, exact)
            self.counters["gate_fallbacks"] += 1
        if gate != self.backend.gate:
            self.backend.use_gate(gate)
        logits, pos = self._prefill(instr, obs, level)
        cycle.first_token_ns = self.clock()
        drafter = (
            None if level.spec_len == 0 or self.drafter == "none" else self.drafters[self.drafter]
        )
        if isinstance(drafter, ModelDrafter):
            drafter.start(
                np.concatenate(
                    [instruction_prefix(md.vocab, instr), observation_segment(md.vocab, obs)]
                )
            )
        reuse = drafter.reuse if isinstance(drafter, CascadeDrafter) else drafter
        if isinstance(reuse, ChunkReuseDrafter):
            previous = cycle.previous
            if previous is None or capture_ns is None:
                reuse.clear()
            else:
                reuse.set_previous(previous[0], previous[1], capture_ns, md.tokenizer.period_ns)
        D = md.tokenizer.dim
        bins = self.decoder.decode(
            logits,
            pos,
            cycle.count * D,
            depth=level.depth,
            drafter=drafter,
            gamma=level.spec_len or None,
            dim=D,
            on_waypoint=on_waypoint,
            forced=self._forced(cycle),
        )
        cycle.previous = None if capture_ns is None else (bins.reshape(-1, D).copy(), capture_ns)
        cycle.stats = self.decoder.stats
        return bins
