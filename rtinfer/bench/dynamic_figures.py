"""What a dynamic-compute variant costs and how well it does, from its config and card:
parameter count, FLOPs of one step graph, lockstep success. Shared by rtinfer bench dynamic's
row builders (rtinfer.bench.dynamic, rtinfer.bench.dynamic_moe). Pure arithmetic."""

from __future__ import annotations


def params(cfg: dict) -> int:
    """Parameter count of a models.policy.Policy with this config (dict), biases included."""
    C, V, T, L, b = cfg["n_embd"], cfg["vocab_size"], cfg["max_ctx"], cfg["n_layer"], cfg["bias"]
    block = 12 * C * C + (13 * C if b else 2 * C)  # qkv, proj, fc, proj; 2 LayerNorms
    return V * C + T * C + L * block + (2 if b else 1) * C + C * V


def pass_flops(cfg: dict, depth: int, rows: int) -> float:
    """FLOPs of one step graph over `rows` tokens at `depth`: matmuls, attention over the
    whole max_ctx buffer (the graphs attend over all of it, masked), the LM head."""
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["max_ctx"]
    return rows * (depth * (24 * C * C + 4 * T * C) + 2 * C * V)


def lockstep_success(card: dict, depth: int) -> dict | None:
    """card.json's lockstep success at `depth` over the instructions it ran, or None."""
    seen = card.get("success", {}).get("seen_instructions", {}).get(str(depth))
    if not seen:
        return None
    return {
        "rate": seen["success_rate"],
        "episodes_objects": seen["spawned"],
        "per_instruction": {
            i: r["success_rate"] for i, r in seen.get("per_instruction", {}).items()
        },
    }
