"""Export a flow policy's guided step graph: the step graph's inputs plus "target" [1, H_m, D_m]
and "weights" [1, H_m, 1] -> "v" and "correction", where (LeRobot 0.4.4's RTC,
arXiv 2506.07339)

    x1 = x_t - t * v(x_t)              the one-step estimate of the clean chunk
    err = (target - x1) * weights      its distance to the previous chunk's left-over
    correction = (d x1 / d x_t)^T err  a vector-Jacobian product through the step

so rtinfer.inference.flow_guidance does the rest of the guidance in numpy. The VJP is traced
with torch.func.vjp under make_fx (forward and backward as plain aten ops), then exported by
torch.onnx's dynamo exporter: the legacy exporter cannot trace autograd. t is [1] or
[1, H_m] (per waypoint). Graph inputs and outputs are renamed to the contract's names (an
initializer that the exporter named like an input is renamed first).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

OPSET = 18
OUTPUTS = ("v", "correction")


def guided(velocity):
    """velocity(cond..., x_t, t) -> the guided step function of the same inputs + target,
    weights."""

    def step(*args):
        *conds, x_t, t, target, weights = args
        time = t.reshape(1, -1, 1)

        def x1_of(x):
            v = velocity(*conds, x, t)
            return x - time * v, v

        x1, vjp, v = torch.func.vjp(x1_of, x_t, has_aux=True)
        return v, vjp((target - x1) * weights)[0]

    return step


def export_guided(velocity, args: tuple, names: list[str], path) -> Path:
    """velocity(*args) the step (args: the step graph's inputs in order, x_t and t last);
    names: the step graph's input names. Writes the guided graph to `path`."""
    import onnx
    from torch.fx.experimental.proxy_tensor import make_fx

    x_t = args[-2]
    extra = (torch.zeros_like(x_t), torch.zeros(1, x_t.shape[1], 1))
    all_args = (*args, *extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = make_fx(guided(velocity))(*all_args)
        prog = torch.onnx.export(
            gm, all_args, None, dynamo=True, opset_version=OPSET, verbose=False
        )
    proto = prog.model_proto  # a fresh proto at each access: take it once
    g = proto.graph
    want = [*names, "target", "weights"]
    ren = {i.name: "w_" + i.name for i in g.initializer if i.name in want + list(OUTPUTS)}
    ren.update({i.name: n for i, n in zip(g.input, want)})
    ren.update({o.name: n for o, n in zip(g.output, OUTPUTS)})
    for v in [*g.initializer, *g.input, *g.output, *g.value_info]:
        v.name = ren.get(v.name, v.name)
    for node in g.node:
        node.input[:] = [ren.get(n, n) for n in node.input]
        node.output[:] = [ren.get(n, n) for n in node.output]
    path = Path(path)
    onnx.save(proto, str(path))
    return path
