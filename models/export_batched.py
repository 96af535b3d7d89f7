"""Batched step graphs: one graph serves B robots' sequences at once, each at its own position.

    python -m models.export_batched models/zoo/conveyor-v1 [--batches 2 4 8]

Written beside a model directory's batch-1 graphs (which stay byte-identical), for the roles a
cycle runs: the instruction and observation-segment prefills, decode, verify, and each exit's
draft and exit prefill. Graph I/O contract (names exact), for depth d, k tokens, batch B:
  inputs  tokens    int64 [B, k]             row b: vocab ids at positions [start_pos[b], +k)
          start_pos int64 [B]                each row's first position (start_pos[b] + k <= max_ctx)
          k{l}, v{l} KV [B, n_head, max_ctx, head_dim], l < d: layer l's cache, read only
  outputs logits    float32 [B, k, V]        at the graph's depth
          kv_new    KV [d, 2, B, n_head, k, head_dim]: the k new positions' keys and values of
                                             the d layers run, for the caller to write into
                                             rows b at [start_pos[b], start_pos[b] + k)
Row b reads only cache row b and its own tokens, so its logits equal the batch-1 graph's on that
row alone, bit for bit on ONNX Runtime's CPU provider (`export_batched` checks every graph against
its batch-1 twin and refuses to write one that differs). The cache is an input, not an output: a
step writes B * k positions instead of copying B whole caches, which is what makes a batch
cheaper per row than B single steps.
The graphs share the directory's weights.bin (their tensors are the batch-1 graphs' tensors;
any new one is appended, so existing offsets and graph files do not change) and are listed
under "batched" in graphs.json: {"file", "roles", "depth", "k", "batch", "dtype", "sha256"}.
fp32 only (the weight-quantised and fp16 sets keep batch 1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from models import checkpoint
from models.export import export_module
from models.share import WEIGHTS, external_tensors, externalise
from rtinfer.model.manifest import read_manifest, write_manifest
from rtinfer.model.obs_tokens import ObsTokens

BATCHES = (2, 4, 8)
BATCHED_ROLES = ("decode", "verify", "draft")  # and the observation-segment prefill


class RowsGraph(nn.Module):
    """Policy.step_rows at a fixed depth with the cache as per-layer inputs."""

    def __init__(self, policy: nn.Module, depth: int):
        super().__init__()
        self.policy, self.depth = policy, depth

    def forward(self, tokens, start_pos, *kv):
        caches = [(kv[2 * l], kv[2 * l + 1]) for l in range(self.depth)]
        logits, kv_new = self.policy.step_rows(tokens, start_pos, caches, self.depth)
        return logits.float(), kv_new


def cache_names(depth: int) -> list[str]:
    return [f"{kv}{l}" for l in range(depth) for kv in ("k", "v")]


def export_rows_graph(policy: nn.Module, depth: int, k: int, batch: int, path) -> Path:
    cfg = policy.cfg
    shape = (batch, cfg.n_head, cfg.max_ctx, cfg.head_dim)
    args = (
        torch.zeros(batch, k, dtype=torch.int64),
        torch.zeros(batch, dtype=torch.int64),
        *[torch.zeros(shape) for _ in range(2 * depth)],
    )
    return export_module(
        policy,
        RowsGraph(policy.eval(), depth),
        args,
        path,
        ["tokens", "start_pos", *cache_names(depth)],
        ["logits", "kv_new"],
    )


def batched_plan(manifest: dict, prefill_ks) -> list[tuple[int, int, list[str]]]:
    """(depth, k, roles) of the fp32 batch-1 graphs a batched cycle runs; prefill_ks: the
    instruction prefix's and the observation segment's lengths."""
    plan = []
    for g in manifest["graphs"]:
        if g["dtype"] != "float32":
            continue
        roles = [
            r for r in g["roles"] if r in BATCHED_ROLES or (r == "prefill" and g["k"] in prefill_ks)
        ]
        if roles:
            plan.append((int(g["depth"]), int(g["k"]), roles))
    return plan


def check_rows(batched_path, single_path, depth: int, k: int, batch: int, seed: int = 0) -> float:
    """Max |logits - batch-1 logits| and |kv_new - batch-1 kv_out window| over the rows of one
    random batch (rows at different positions): 0.0 when the graph is exact."""
    from models.parity import ort_session

    rows, one = ort_session(batched_path), ort_session(single_path)
    shape = [int(d) for d in next(i.shape for i in one.get_inputs() if i.name == "kv")]
    shape[2] = batch
    rng = np.random.default_rng(seed)
    T = shape[4]
    kv = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    vocab = int(rows.get_outputs()[0].shape[2])
    tokens = rng.integers(0, vocab, size=(batch, k), dtype=np.int64)
    start = rng.integers(0, T - k + 1, size=batch).astype(np.int64)
    feed = {"tokens": tokens, "start_pos": start}
    feed.update({f"{n}{l}": kv[l, j] for l in range(depth) for j, n in enumerate("kv")})
    logits, kv_new = rows.run(["logits", "kv_new"], feed)
    worst = 0.0
    for b in range(batch):
        ref, ref_kv = one.run(
            ["logits", "kv_out"],
            {
                "tokens": tokens[b : b + 1],
                "start_pos": start[b : b + 1],
                "kv": np.ascontiguousarray(kv[:, :, b : b + 1]),
            },
        )
        s = int(start[b])
        worst = max(
            worst,
            float(np.abs(ref[0] - logits[b]).max()),
            float(np.abs(ref_kv[:depth, :, 0, :, s : s + k] - kv_new[:, :, b]).max()),
        )
    return worst


def _share_into(path: Path, blob: bytearray, seen: dict) -> None:
    """Point a graph's initializers at weights.bin (appending any tensor not yet there)."""
    model = onnx.load(str(path))
    externalise(model, blob, seen)
    onnx.save_model(model, str(path))


def export_batched(model_dir, batches=BATCHES, *, policy: nn.Module | None = None) -> dict:
    """Write the batched graphs into a model directory (policy: its torch model, default the
    directory's policy.safetensors checkpoint). Returns {file: max abs diff vs batch 1}."""
    out = Path(model_dir)
    manifest = read_manifest(out)
    if policy is None:
        policy = checkpoint.load(out / "policy").model
    obs = ObsTokens(json.loads((out / "obs_tokens.json").read_text()))
    prefill_ks = (1 + obs.instr_length, obs.length + 1)  # instruction prefix, observation segment
    for old in manifest.get("batched", []):
        (out / old["file"]).unlink(missing_ok=True)
    blob = bytearray((out / WEIGHTS).read_bytes()) if (out / WEIGHTS).exists() else bytearray()
    seen = external_tensors(
        out,
        [
            g["file"]
            for g in manifest["graphs"]  # the fp32 set's
            if Path(g["file"]).parent == Path(".")
        ],
        bytes(blob),
    )
    entries, report = [], {}
    for depth, k, roles in batched_plan(manifest, prefill_ks):
        single = out / f"step_d{depth}_k{k}.onnx"
        for b in batches:
            path = export_rows_graph(policy, depth, k, b, out / f"step_d{depth}_k{k}_b{b}.onnx")
            diff = check_rows(path, single, depth, k, b)
            if diff != 0.0:
                raise RuntimeError(
                    f"{path.name}: differs from {single.name} by {diff:g} on ONNX "
                    "Runtime; a batched graph must equal its batch-1 twin exactly"
                )
            report[path.name] = diff
            if blob:
                _share_into(path, blob, seen)
            entries.append(
                {
                    "file": path.name,
                    "roles": roles,
                    "depth": depth,
                    "k": k,
                    "batch": b,
                    "dtype": "float32",
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                }
            )
    if blob:
        (out / WEIGHTS).write_bytes(bytes(blob))
        manifest.setdefault("weights", {})[WEIGHTS] = hashlib.sha256(blob).hexdigest()
    manifest["batched"] = entries
    write_manifest(out, manifest)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    a = ap.parse_args(argv)
    report = export_batched(a.model_dir, tuple(a.batches))
    print(json.dumps({"graphs": len(report), "max_abs_diff": max(report.values(), default=0.0)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
