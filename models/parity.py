"""ONNX Runtime vs torch parity checks for exported step graphs (CPU, offline).

The torch reference is always the fp32 model; an fp16 graph is fed the same inputs with kv
rounded to fp16 (the reference sees that rounded kv too), so the figures measure the
graph's own error.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def ort_session(path, threads: int = 1) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _kv_dtype(sess: ort.InferenceSession):
    return _NP[next(i.type for i in sess.get_inputs() if i.name == "kv")]


def _torch_step(model, tokens, start_pos: int, kv: np.ndarray, depth: int | None):
    was_training = model.training
    with torch.no_grad():
        logits, kv_out = model.eval().step(
            torch.from_numpy(tokens), start_pos, torch.from_numpy(kv.astype(np.float32)), depth
        )
    model.train(was_training)
    return logits.numpy(), kv_out.numpy()


def step_parity(model: nn.Module, path, depth: int, k: int, seed: int = 0) -> dict:
    """One step on random valid inputs: max abs diff of logits and kv_out, argmax equality."""
    cfg, rng = model.cfg, np.random.default_rng(seed)
    sess = ort_session(path)
    tokens = rng.integers(0, cfg.vocab_size, size=(1, k), dtype=np.int64)
    start = int(rng.integers(0, cfg.max_ctx - k + 1))
    kv = (0.5 * rng.standard_normal(cfg.kv_shape(1))).astype(_kv_dtype(sess))
    logits, kv_out = sess.run(
        ["logits", "kv_out"], {"tokens": tokens, "start_pos": np.array([start], np.int64), "kv": kv}
    )
    ref_logits, ref_kv = _torch_step(model, tokens, start, kv, depth)
    return {
        "max_abs_logits": float(np.abs(logits - ref_logits).max()),
        "max_abs_kv": float(np.abs(kv_out.astype(np.float32) - ref_kv).max()),
        "argmax_equal": bool((logits.argmax(-1) == ref_logits.argmax(-1)).all()),
    }


def greedy_parity(
    model: nn.Module, prefill_path, decode_path, steps: int = 16, seed: int = 0
) -> dict:
    """Prefill a random prefix, then greedy k=1 decode with both ORT graphs and torch.
    match: the generated token sequences are identical."""
    cfg, rng = model.cfg, np.random.default_rng(seed)
    pre, dec = ort_session(prefill_path), ort_session(decode_path)
    p = next(i.shape[1] for i in pre.get_inputs() if i.name == "tokens")
    steps = min(steps, cfg.max_ctx - p)
    prefix = rng.integers(0, cfg.vocab_size, size=(1, p), dtype=np.int64)
    kv0 = np.zeros(cfg.kv_shape(1), _kv_dtype(pre))
    out = {}
    for who in ("ort", "torch"):
        kv, toks, tokens, pos = kv0, [], prefix, 0
        for sess in [pre] + [dec] * steps:
            if who == "ort":
                logits, kv = sess.run(
                    ["logits", "kv_out"],
                    {"tokens": tokens, "start_pos": np.array([pos], np.int64), "kv": kv},
                )
            else:
                logits, kv = _torch_step(model, tokens, pos, kv, None)
            pos += tokens.shape[1]
            tokens = logits[:, -1:].argmax(-1).astype(np.int64)
            toks.append(int(tokens[0, 0]))
        out[who] = toks
    return {
        "match": out["ort"] == out["torch"],
        "tokens_ort": out["ort"],
        "tokens_torch": out["torch"],
    }
