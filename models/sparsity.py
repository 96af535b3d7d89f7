"""2:4 structured sparsity for the transformer blocks' Linear weights, via torch.ao.pruning.

Targets: every nn.Linear inside `model.blocks` (attention c_attn/c_proj, MLP c_fc/c_proj);
never the embeddings or the LM head. The pattern is 2 zeros in every 4 contiguous *input*
elements of each output row, the layout TensorRT's sparse tensor cores take
(`BuilderFlag.SPARSE_WEIGHTS`).

Fine-tuning under the masks:
    sp = prepare(model)     # attaches torch.ao FakeSparsity masks and computes them once
    ... train ...           # module.weight reads as original * mask; grads reach original
    sp.step()               # optional: recompute masks (they read the masked weight, so a
                            # re-step keeps the same pattern unless weights tie at zero)
    fold(model)             # bake masks into plain weights; raises if a target is not 2:4
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn
from torch.ao.pruning import WeightNormSparsifier
from torch.ao.pruning.sparsifier.utils import FakeSparsity
from torch.nn.utils import parametrize


def sparse_targets(model: nn.Module) -> list[str]:
    """Fully qualified names of the weights that carry the 2:4 pattern."""
    return [
        f"blocks.{i}.{name}.weight"
        for i, block in enumerate(model.blocks)
        for name, mod in block.named_modules()
        if isinstance(mod, nn.Linear)
    ]


def prepare(model: nn.Module) -> WeightNormSparsifier:
    """Attach 2:4 masks to the block Linear weights; masks are computed before returning."""
    sparsifier = WeightNormSparsifier(
        sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2
    )
    sparsifier.prepare(model, [{"tensor_fqn": fqn} for fqn in sparse_targets(model)])
    sparsifier.step()
    return sparsifier


def fold(model: nn.Module) -> list[str]:
    """Squash every attached FakeSparsity mask into its weight (what squash_mask does, but
    without needing the sparsifier object) and check the result. Returns folded names.
    Raises ValueError if any target weight then fails the 2:4 check."""
    folded = []
    for mname, mod in model.named_modules():
        if not parametrize.is_parametrized(mod):
            continue
        for tname in list(mod.parametrizations.keys()):
            if any(isinstance(p, FakeSparsity) for p in mod.parametrizations[tname]):
                parametrize.remove_parametrizations(mod, tname, leave_parametrized=True)
                folded.append(f"{mname}.{tname}")
    bad = [k for k, ok in report(model).items() if not ok]
    if bad:
        raise ValueError(f"weights not 2:4 after fold: {bad}; call prepare() before training")
    return folded


def check_24(weight, in_axis: int = -1) -> bool:
    """True when every group of 4 contiguous elements along `in_axis` has >= 2 zeros.

    weight: 2-D numpy array or tensor. torch Linear weights are (out, in): in_axis=-1; an
    ONNX MatMul B initializer is (in, out): in_axis=0. An input size that is not a multiple
    of 4 fails (TensorRT would not use sparse kernels for it either).
    """
    w = weight.detach().cpu().float().numpy() if torch.is_tensor(weight) else np.asarray(weight)
    if w.ndim != 2:
        return False
    w = np.moveaxis(w, in_axis, -1)
    if w.shape[-1] % 4:
        return False
    zeros = (w.reshape(w.shape[0], -1, 4) == 0).sum(-1)
    return bool((zeros >= 2).all())


def report(model: nn.Module) -> dict[str, bool]:
    """check_24 of every target weight of a torch model (masked view if still prepared)."""
    out = {}
    for fqn in sparse_targets(model):
        mod = model.get_submodule(fqn.rsplit(".", 1)[0])
        out[fqn] = check_24(mod.weight)
    return out


def check_onnx_24(path) -> dict[str, bool]:
    """check_24 of every constant weight feeding a MatMul (B input, axis 0 = input) or a
    Gemm (axis from transB) in an ONNX file. Keys are initializer names; the LM head is
    listed too and is expected dense (False). Our exporter names block weights
    `<torch fqn>` (Gemm/as stored) or `<torch fqn>_T` (transposed for MatMul)."""
    graph = onnx.load(str(path)).graph
    inits = {i.name: i for i in graph.initializer}
    out = {}
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            name, axis = node.input[1], 0
        elif node.op_type == "Gemm" and node.input[1] in inits:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            name, axis = node.input[1], 1 if trans_b else 0
        else:
            continue
        w = numpy_helper.to_array(inits[name])
        if w.ndim == 2:
            out[name] = check_24(w, in_axis=axis)
    return out
