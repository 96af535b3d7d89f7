"""ONNX export of the static-shape decode step graphs, plus a graphs.json manifest.

One graph per (depth, k) the runtime can select (batch 1):
  full depth: prefill (k = prefix length), decode (k = 1), verify (k = k_verify)
  each early exit: draft (k = 1)
Graph I/O contract (names exact):
  inputs  tokens    int64 [1, k]      vocab ids at positions [start_pos, start_pos + k)
          start_pos int64 [1]         first position; caller keeps start_pos + k <= max_ctx
          kv        KV    cfg.kv_shape(1) = [n_layer, 2, 1, n_head, max_ctx, head_dim]
  outputs logits    float32 [1, k, V] at the graph's depth
          kv_out    KV    same shape as kv; layers deeper than the graph's depth pass through
KV is float32 in the fp32 graphs and float16 in the fp16 graphs (state stays half, halving
bandwidth); logits are always float32 (cast after the LM head). The fp16 graph carries
explicit Casts around LayerNorm and softmax, so TensorRT strongly typed builds keep them fp32.
IOBinding: binding kv_out onto the kv buffer itself was bit-exact over 30 chained steps on
ORT 1.32 CPU (tests/test_export.py pins it), but ORT does not document input/output aliasing
as safe; binding kv_out to a second preallocated buffer and swapping (ping-pong) always is.

Exporter: torch.onnx legacy TorchScript path (dynamo=False), opset 17, on torch 2.13: it
exports these graphs in a fraction of a second and round-trips bit-close; the dynamo
exporter also works (`dynamo=True`) but is ~20x slower per graph.
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from models.config import PolicyConfig, Vocab
from models.parity import greedy_parity, step_parity
from models.sparsity import check_onnx_24
from rtinfer.model.manifest import MANIFEST, write_manifest

OPSET = 17


class StepGraph(nn.Module):
    """Policy.step at a fixed depth, with float32 logits: the module that gets exported."""

    def __init__(self, policy: nn.Module, depth: int):
        super().__init__()
        self.policy, self.depth = policy, depth

    def forward(self, tokens, start_pos, kv):
        logits, kv_out = self.policy.step(tokens, start_pos, kv, self.depth)
        return logits.float(), kv_out


def graph_plan(
    cfg: PolicyConfig, k_verify: int, prefix_lens, exit_prefills=()
) -> dict[tuple[int, int], list[str]]:
    """(depth, k) -> roles. A (depth, k) pair needed for two roles is exported once.
    exit_prefills: (exit depth, k) prefill graphs: a budget level that decodes at that exit
    then prefills the observation there too and skips the deeper layers entirely (its first
    action token then comes from the exit head: check the level's success before shipping)."""
    plan: dict[tuple[int, int], list[str]] = {}
    wanted = [("decode", cfg.n_layer, 1), ("verify", cfg.n_layer, k_verify)]
    wanted += [("prefill", cfg.n_layer, p) for p in prefix_lens]
    wanted += [("draft", e, 1) for e in cfg.exits]
    for e, k in exit_prefills:
        if e not in cfg.exits:
            raise ValueError(f"exit prefill at depth {e}: not an exit of this model {cfg.exits}")
        wanted.append(("prefill", e, k))
    for role, depth, k in wanted:
        if not 1 <= k <= cfg.max_ctx:
            raise ValueError(f"{role} k={k} outside [1, max_ctx={cfg.max_ctx}]")
        plan.setdefault((depth, k), []).append(role)
    return plan


def export_graph(
    policy: nn.Module,
    depth: int,
    k: int,
    path,
    *,
    opset: int = OPSET,
    dynamo: bool = False,
    free_k: bool = False,
) -> Path:
    """Export one step graph (policy's dtype decides fp32/fp16), name weights, check it.
    free_k: the token count is a free dimension (traced at k; models.shared_k)."""
    cfg, p = policy.cfg, next(policy.parameters())
    args = (
        torch.zeros(1, k, dtype=torch.int64),
        torch.zeros(1, dtype=torch.int64),
        torch.zeros(cfg.kv_shape(1), dtype=p.dtype),
    )
    return export_module(
        policy,
        StepGraph(policy.eval(), depth),
        args,
        path,
        ["tokens", "start_pos", "kv"],
        ["logits", "kv_out"],
        opset=opset,
        dynamo=dynamo,
        dynamic_axes={"tokens": {1: "k"}, "logits": {1: "k"}} if free_k else None,
    )


def export_module(
    policy: nn.Module,
    module: nn.Module,
    args: tuple,
    path,
    inputs: list[str],
    outputs: list[str],
    *,
    opset: int = OPSET,
    dynamo: bool = False,
    dynamic_axes: dict | None = None,
) -> Path:
    """torch.onnx.export a graph module wrapping `policy` (in eval mode; its train/eval mode
    is restored), give the initializers the policy's names, check the graph, save it.
    dynamic_axes: torch.onnx.export's (a free dimension per input or output name)."""
    path = Path(path)
    kw = dict(input_names=inputs, output_names=outputs, opset_version=opset, dynamo=dynamo)
    if dynamic_axes:
        kw["dynamic_axes"] = dynamic_axes
    was_training = policy.training
    policy.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation + tracer chatter
        torch.onnx.export(
            module, args, str(path), **kw, **({"external_data": False} if dynamo else {})
        )
    policy.train(was_training)
    proto = onnx.load(str(path))
    _name_weights(proto, policy)
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))
    return path


def _name_weights(proto: onnx.ModelProto, policy: nn.Module) -> None:
    """Give initializers their torch names (`<fqn>`, or `<fqn>_T` when the exporter stored
    the transpose for a MatMul), so graph weights can be traced back to the checkpoint."""

    def key(a: np.ndarray) -> tuple:
        return a.shape, a.dtype.str, hashlib.sha256(np.ascontiguousarray(a).data).digest()

    by_value: dict[tuple, str | None] = {}
    for fqn, t in policy.state_dict().items():
        a = t.detach().cpu().numpy()
        for k, name in [(key(a), fqn)] + ([(key(a.T), fqn + "_T")] if a.ndim == 2 else []):
            # equal values (fresh LayerNorms) are ambiguous
            by_value[k] = None if k in by_value else name
    taken = {i.name for i in proto.graph.input}
    rename = {}
    for init in proto.graph.initializer:
        new = by_value.get(key(onnx.numpy_helper.to_array(init)))
        if new and new not in taken:
            rename[init.name], init.name = new, new
            taken.add(new)
    for node in proto.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = rename.get(name, name)


def _io(cfg: PolicyConfig, k: int, kv_dtype: str) -> dict:
    kv = {"dtype": kv_dtype, "shape": list(cfg.kv_shape(1))}
    return {
        "inputs": [
            {"name": "tokens", "dtype": "int64", "shape": [1, k]},
            {"name": "start_pos", "dtype": "int64", "shape": [1]},
            {"name": "kv", **kv},
        ],
        "outputs": [
            {"name": "logits", "dtype": "float32", "shape": [1, k, cfg.vocab_size]},
            {"name": "kv_out", **kv},
        ],
    }


def export_all(
    model: nn.Module,
    cfg: PolicyConfig,
    out_dir,
    k_verify: int = 8,
    prefix_len=None,
    *,
    vocab: Vocab | None = None,
    fp16: bool = True,
    opset: int = OPSET,
    dynamo: bool = False,
    seed: int = 0,
    exit_prefills=(),
) -> dict:
    """Write every step graph (fp32, and fp16 under out_dir/fp16/) plus graphs.json.

    prefix_len: int or sequence of ints, one prefill graph each (default max_ctx // 2).
    Returns the parity figures: per graph ORT-vs-torch max abs diff on logits and kv_out,
    2:4 check of block weights, and a greedy decode comparison (tokens identical).
    The model is left unchanged (fp16 export works on a copy; train/eval mode is restored).
    Blocks for seconds (tiny) to minutes (bench size: ~350 MB per fp32 graph).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix_lens = (
        [cfg.max_ctx // 2]
        if prefix_len is None
        else ([prefix_len] if isinstance(prefix_len, int) else list(prefix_len))
    )
    variants = [("float32", model, "")]
    if fp16:
        variants.append(("float16", copy.deepcopy(model).half(), "fp16/"))
        (out_dir / "fp16").mkdir(exist_ok=True)
    graphs, parity = [], {"graphs": {}}
    plan = graph_plan(cfg, k_verify, prefix_lens, exit_prefills)
    for dtype, policy, sub in variants:
        for (depth, k), roles in plan.items():
            name = f"{sub}step_d{depth}_k{k}.onnx"
            path = export_graph(policy, depth, k, out_dir / name, opset=opset, dynamo=dynamo)
            sparse = {n: ok for n, ok in check_onnx_24(path).items() if n.startswith("blocks.")}
            parity["graphs"][name] = {
                **_checked(dtype, step_parity, model, path, depth, k, seed),
                "weights_24": all(sparse.values()) if sparse else None,
            }
            graphs.append(
                {
                    "file": name,
                    "roles": roles,
                    "depth": depth,
                    "k": k,
                    "dtype": dtype,
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                    **_io(cfg, k, dtype),
                }
            )
        decode = out_dir / f"{sub}step_d{cfg.n_layer}_k1.onnx"
        prefill = out_dir / f"{sub}step_d{cfg.n_layer}_k{prefix_lens[0]}.onnx"
        parity[f"greedy_{dtype}"] = _checked(
            dtype, greedy_parity, model, prefill, decode, seed=seed
        )
    manifest = {
        "format": "rtinfer-graphs",
        "version": 1,
        "opset": opset,
        "exporter": f"torch {torch.__version__} onnx {'dynamo' if dynamo else 'legacy'}",
        "config": cfg.to_dict(),
        "vocab": vocab.to_dict() if vocab else None,
        "batch": 1,
        "kv_layout": ["layer", "k|v", "batch", "head", "position", "head_dim"],
        "graphs": graphs,
    }
    write_manifest(out_dir, manifest)
    parity["manifest"] = str(out_dir / MANIFEST)
    return parity


def _checked(dtype: str, check, *args, **kw) -> dict:
    """fp32 parity failures raise; fp16 ones are reported, since ORT's CPU provider lacks
    some fp16 kernels and the fp16 graphs are meant for TensorRT."""
    if dtype == "float32":
        return check(*args, **kw)
    try:
        return check(*args, **kw)
    except Exception as e:  # onnxruntime raises its own untyped errors here
        return {"error": f"{type(e).__name__}: {e}"}
