"""The flow contract's checks of loaded graphs: a prefix session and its step sessions against
each other and against the model directory's specs (docs/policies.md, section 11). One line
per problem with the fix; FlowRunner refuses to load on any, `rtinfer check-model` prints all.
"""

from __future__ import annotations

from rtinfer.inference.graph_runner import input_problems, ort_type
from rtinfer.model.flow_model import FlowModelDir

X, T, V = "x_t", "t", "v"


def flow_problems(prefix, steps: list, model: FlowModelDir) -> list[str]:
    """Where loaded prefix and step graphs break the flow contract: one line each with the fix
    (empty: none)."""
    out = [f"{model.prefix_path}: {p}" for p in input_problems(prefix, model.obs)]
    outs = {o.name: o for o in prefix.get_outputs()}
    for o in outs.values():
        if not all(isinstance(d, int) for d in o.shape):
            out.append(
                f"{model.prefix_path}: output {o.name!r} has shape {o.shape}; export "
                f"the prefix with static shapes"
            )
    a, shape0 = model.action, None
    for path, sess in zip(model.step_paths, steps):
        ins = {i.name: i for i in sess.get_inputs()}
        for name, i in ins.items():
            o = outs.get(name)
            if name in (X, T):
                continue
            if o is None:
                out.append(
                    f"{path}: input {name!r} is not a prefix output (the prefix gives "
                    f"{sorted(outs)}); export the step graph to take only those, x_t and t"
                )
            elif o.type != i.type or list(o.shape) != list(i.shape):
                out.append(
                    f"{path}: input {name!r} is {i.type} {i.shape} but the prefix's "
                    f"output is {o.type} {o.shape}; export prefix and step graphs from "
                    f"the same model with the same static shapes"
                )
        x, t = ins.get(X), ins.get(T)
        if (
            x is None
            or x.type != ort_type("float32")
            or len(x.shape) != 3
            or x.shape[0] != 1
            or not all(isinstance(d, int) for d in x.shape)
            or x.shape[1] < a.horizon
            or x.shape[2] < a.dim
        ):
            got = f"{x.type} {x.shape}" if x is not None else "missing"
            out.append(
                f"{path}: input 'x_t' is {got}; the contract is float32 [1, H_m, D_m] "
                f"with H_m >= {a.horizon} and D_m >= {a.dim} (the action spec's horizon "
                f"and names): export with a static noisy-chunk input named x_t"
            )
            continue
        if shape0 is not None and list(x.shape) != shape0:
            out.append(
                f"{path}: x_t is {x.shape} but step graph 0's is {shape0}; every step "
                f"graph must take the same chunk shape"
            )
        shape0 = shape0 or list(x.shape)
        types = [ort_type("float32")] + ([ort_type("int64")] if model.integrator == "ddim" else [])
        if t is None or t.type not in types or list(t.shape) not in ([1], [1, x.shape[1]]):
            got = f"{t.type} {t.shape}" if t is not None else "missing"
            out.append(
                f"{path}: input 't' is {got}; the contract is float32 [1] or "
                f"[1, {x.shape[1]}] (per waypoint)"
                + (" or int64 [1]" if model.integrator == "ddim" else "")
                + ": export the time input with that shape"
            )
        vs = sess.get_outputs()
        if (
            [o.name for o in vs] != [V]
            or vs[0].type != ort_type("float32")
            or list(vs[0].shape) != list(x.shape)
        ):
            got = [(o.name, o.type, o.shape) for o in vs]
            out.append(
                f"{path}: outputs {got}; the contract is one output 'v' float32 "
                f"{list(x.shape)} (x_t's shape)"
            )
    if shape0 is not None:
        out += _affine_problems(model, shape0[1], shape0[2])
    return out


def _affine_problems(model: FlowModelDir, h_m: int, d_m: int) -> list[str]:
    aff = model.affine()
    if aff is None:
        return []
    return [
        f"{model.path / 'graphs.json'}: action_affine.{name} has shape {list(v.shape)} "
        f"but the step graphs' x_t is [1, {h_m}, {d_m}]; give [{d_m}] or [{h_m}, {d_m}]"
        for name, v in zip(("scale", "offset"), aff)
        if list(v.shape) not in ([d_m], [h_m, d_m])
    ]
