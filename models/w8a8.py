"""The w8a8 graph set: int8 weights per output channel, int8 activations per token.

    python -m models.quantise DIR w8a8

Each MatMul of a step graph whose second input is a weight (an initializer of two axes,
[K, N]) becomes, in plain ONNX ops:
    s  = max(|x|, over K) / 127                         one scale per token (row of x)
    xq = QuantizeLinear(x / s, 1, 128)                  uint8, zero point 128
    y  = float(MatMulInteger(xq, Wq, 128, 0)) * s * ws  Wq int8, ws its per-column scale
The products are summed in int32, exactly, and the scales are per token, so no rounding
in these products spans the tokens of a step: a token's activations are quantised the same
in a verify of 8 as in a step of 1, and speculative greedy on this set equals its own plain
greedy, as on the fp32 and MatMulNBits sets (the rest of the graph, attention included, is
the fp32 graph's). ONNX Runtime's own dynamic quantisation (`quantize_dynamic`) takes one
activation scale across the whole input, all k tokens of a verify, and would break that.
What it buys: MLAS's u8s8 integer GEMM serves the prefill and the verify with several rows
at a time, where MatMulNBits decodes its blocks again for every row (a 768 x 3072 product
on the 2-core host: 54 / 132 / 372 us for 1 / 8 / 28 rows, against 55 / 297 / 1,006 us for
MatMulNBits int4 at accuracy level 4). The weights are twice int4's bytes, so a k=1 step of
a model too large for the caches streams twice as much.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ZERO_POINT = 128  # the activations' zero point (uint8), symmetric around it
LEVELS = 127.0  # |x| <= max |x| of its row maps to 127 steps each side
EPS = 1e-12  # an all-zero row gets this scale instead of 0


def quantise_w8a8(src, dst) -> int:
    """Rewrite the fp32 step graph `src` (its external weights are read) into `dst`, weights
    inside. Returns the number of MatMuls rewritten."""
    model = onnx.load(str(src))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consts = [
        numpy_helper.from_array(np.array(1.0 / LEVELS, np.float32), "w8a8_inv_levels"),
        numpy_helper.from_array(np.array(EPS, np.float32), "w8a8_eps"),
        numpy_helper.from_array(np.array(1.0, np.float32), "w8a8_one"),
        numpy_helper.from_array(np.array(ZERO_POINT, np.uint8), "w8a8_zp"),
        numpy_helper.from_array(np.array(0, np.int8), "w8a8_wzp"),
    ]
    nodes, done, dropped = [], 0, set()
    for n in g.node:
        w = inits.get(n.input[1]) if n.op_type == "MatMul" else None
        if w is None or len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
            nodes.append(n)
            continue
        a = numpy_helper.to_array(w)
        scale = np.maximum(np.abs(a).max(axis=0), EPS) / LEVELS  # per output column
        wq = np.clip(np.rint(a / scale), -127, 127).astype(np.int8)
        p = f"{n.name or n.output[0]}_w8a8"
        g.initializer.extend(
            [
                numpy_helper.from_array(wq, f"{w.name}_q8"),
                numpy_helper.from_array(scale.astype(np.float32), f"{w.name}_s8"),
            ]
        )
        dropped.add(w.name)
        x, y = n.input[0], n.output[0]
        nodes += [
            helper.make_node("Abs", [x], [f"{p}_abs"], name=f"{p}_abs"),
            helper.make_node(
                "ReduceMax", [f"{p}_abs"], [f"{p}_max"], axes=[-1], keepdims=1, name=f"{p}_max"
            ),
            helper.make_node("Max", [f"{p}_max", "w8a8_eps"], [f"{p}_maxe"], name=f"{p}_maxe"),
            helper.make_node("Mul", [f"{p}_maxe", "w8a8_inv_levels"], [f"{p}_s"], name=f"{p}_s"),
            helper.make_node("Div", [x, f"{p}_s"], [f"{p}_xs"], name=f"{p}_xs"),
            helper.make_node(
                "QuantizeLinear", [f"{p}_xs", "w8a8_one", "w8a8_zp"], [f"{p}_xq"], name=f"{p}_q"
            ),
            helper.make_node(
                "MatMulInteger",
                [f"{p}_xq", f"{w.name}_q8", "w8a8_zp", "w8a8_wzp"],
                [f"{p}_acc"],
                name=f"{p}_mmi",
            ),
            helper.make_node("Cast", [f"{p}_acc"], [f"{p}_f"], to=TensorProto.FLOAT, name=f"{p}_f"),
            helper.make_node("Mul", [f"{p}_f", f"{p}_s"], [f"{p}_fs"], name=f"{p}_fs"),
            helper.make_node("Mul", [f"{p}_fs", f"{w.name}_s8"], [y], name=f"{p}_y"),
        ]
        done += 1
    still = {i for m in nodes for i in m.input}
    keep = [t for t in g.initializer if t.name not in dropped or t.name in still]
    del g.initializer[:]
    g.initializer.extend(keep + consts)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save_model(model, str(Path(dst)))
    return done
