"""Row `policy_vs_torch_eager`: one action chunk from the same policy weights, two ways.

Peer: how most users run a policy: the torch `Policy` from the checkpoint, `model(idx)`
under `torch.no_grad()`, greedy over the action range, re-running the whole sequence for
every token (no KV cache, nothing reused across cycles). rtinfer: TokenRunner (ONNX
Runtime, instruction-prefix KV cache, speculative decoding with chunk reuse) at full
quality (budget level 0). Both run on the same drifting observation stream, alternated
per cycle (A B A B), with the same intra-op thread count; tokens must be identical.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from peers.row import make_row, package_version, unavailable_row
from rtinfer.bench.decode import token_stream

NAME, PEER = "policy_vs_torch_eager", "torch eager (no KV cache)"
TARGET = 3.0


def eager_chunk(model, prefix: np.ndarray, n: int, a0: int, a1: int) -> np.ndarray:
    """Greedy action bins the plain way: full forward per token, argmax over actions."""
    import torch

    idx = torch.as_tensor(prefix, dtype=torch.int64)[None]
    out = np.empty(n, np.int64)
    with torch.no_grad():
        for i in range(n):
            b = int(model(idx)[0, -1, a0:a1].argmax())
            out[i] = b
            idx = torch.cat([idx, torch.tensor([[b + a0]])], dim=1)
    return out


def rows(model_dir, cycles: int, threads: int = 1, seed: int = 0, warmup: int = 3) -> list[dict]:
    model_dir = Path(model_dir)
    if package_version("torch") is None or package_version("onnxruntime") is None:
        return [unavailable_row(NAME, PEER, "needs torch and onnxruntime")]
    if not (model_dir / "policy.safetensors").exists():
        return [unavailable_row(NAME, PEER, f"{model_dir} has no policy.safetensors checkpoint")]
    import torch

    from models import checkpoint
    from rtinfer.inference.budget import default_levels
    from rtinfer.inference.runner import TokenRunner
    from rtinfer.model.directory import ModelDir
    from rtinfer.model.sequence import build_prefix

    torch.set_num_threads(threads)
    model = checkpoint.load(model_dir / "policy").model.float().eval()
    md = ModelDir.load(model_dir)
    runner = TokenRunner(md, backend="onnx", backend_opts={"threads": threads}, drafter="chunk")
    level = default_levels(md, runner.decoder.k_verify)[0]
    v, n, period = md.vocab, md.chunk_tokens, md.tokenizer.period_ns
    ours, theirs, mismatched = [], [], 0
    for i, (instr, obs) in enumerate(token_stream(md, cycles + warmup, seed)):
        t0 = time.perf_counter_ns()
        bins, _ = runner.run(instr, obs, i * period, level)  # one waypoint period per cycle
        t1 = time.perf_counter_ns()
        ref = eager_chunk(model, build_prefix(v, instr, obs), n, v.action_start, v.action_stop)
        t2 = time.perf_counter_ns()
        mismatched += int(not np.array_equal(bins, ref))
        if i >= warmup:
            ours.append(t1 - t0)
            theirs.append(t2 - t1)
    chunk = runner.drafters["chunk"]
    return [
        make_row(
            NAME,
            PEER,
            package_version("torch"),
            ours,
            theirs,
            target_speedup_p50=TARGET,
            unit="us per chunk",
            identical=mismatched == 0,
            mismatched_chunks=mismatched,
            chunk_tokens=n,
            threads=threads,
            model=str(model_dir),
            params=sum(p.numel() for p in model.parameters()),
            draft_acceptance=round(chunk.acceptance, 3),
            rtinfer_config="onnx, prefix cache, speculative (chunk reuse), level 0",
        )
    ]
