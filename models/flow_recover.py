"""Read a conveyor flow package's weights back from its ONNX graphs into
models.flow_train.FlowNet (a package ships graphs, not checkpoints): the prefix graph's named
encoder weights and its stats (mean, std, scale), the step graph's named parameters and its
exported MatMul weights, transposed, in the order the step computes them. The affine offset
comes from the directory's manifest. Parity: tests/test_flow_recover.py."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch
from onnx import numpy_helper

from models.flow_train import FlowConfig, FlowNet
from rtinfer.model.flow_model import FlowModelDir


def recover(model_dir) -> tuple[FlowNet, dict]:
    """(FlowNet in eval mode, stats {cond_mean, cond_std, act_scale, act_offset})."""
    d = Path(model_dir)
    pre = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(str(d / "prefix.onnx")).graph.initializer
    }
    step = onnx.load(str(d / "step.onnx")).graph.initializer
    mats = [numpy_helper.to_array(i) for i in step if i.name.startswith("onnx::MatMul")]
    state = {
        k[4:]: torch.from_numpy(v.copy())
        for k, v in {**pre, **{i.name: numpy_helper.to_array(i) for i in step}}.items()
        if k.startswith("net.")
    }
    layers = sum(1 for k in state if k.endswith(".n1.weight"))
    cfg = FlowConfig(
        cond_dim=pre["net.encoder.0.weight"].shape[1],
        horizon=state["act_pos"].shape[0],
        action_dim=mats[0].shape[0],
        width=state["act_pos"].shape[1],
        layers=layers,
    )
    order = [
        "act_in",
        "t_mlp.0",
        "t_mlp.2",
        *(f"blocks.{b}.{n}" for b in range(layers) for n in ("qkv", "proj", "mlp.0", "mlp.2")),
        "out",
    ]
    if len(order) != len(mats):
        raise ValueError(
            f"{d}/step.onnx: {len(mats)} MatMul weights, the FlowNet has "
            f"{len(order)}: not a models.flow_train step graph"
        )
    for name, m in zip(order, mats):
        state[f"{name}.weight"] = torch.from_numpy(m.T.copy())
    net = FlowNet(cfg)
    net.load_state_dict(state)
    aff = FlowModelDir.load(d).affine()
    if aff is None:
        raise ValueError(f"{d}: no action affine in the manifest: not a conveyor flow package")
    H, D = cfg.horizon, cfg.action_dim
    stats = {
        "cond_mean": pre["mean"].tolist(),
        "cond_std": pre["std"].tolist(),
        "act_scale": aff[0][:H, :D].tolist(),
        "act_offset": aff[1][:H, :D].tolist(),
    }
    return net.eval(), stats
