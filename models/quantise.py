"""Quantised step graphs (int8, int4, w8a8) beside the fp32 and fp16 sets of a model directory.

    python -m models.quantise models/zoo/conveyor-v1 int8 int4 [w8a8]
    rtinfer export --checkpoint CKPT --out DIR --quantise int8 int4

The quantiser is ONNX Runtime's own (onnxruntime.quantization.matmul_nbits_quantizer): every
MatMul with a constant weight (the blocks' four Linear layers and the LM head) becomes a
com.microsoft MatMulNBits node with the weight in `bits`-bit blocks of `block_size` along K
and one fp32 scale per block (symmetric, round to nearest). Embeddings, LayerNorms, biases,
attention and the KV cache stay fp32. accuracy_level 4 lets ONNX Runtime's CPU kernel
multiply in int8: it quantises each activation row, one token, per block from that row
alone. So a k-token verify rounds every row as a 1-token step does, and speculative greedy
stays token-identical to plain greedy on the same graphs (tests/test_quantised.py). Dynamic
activation quantisation (quantize_dynamic) is not used: it takes one scale per call from all
k tokens, so a verify would round differently from the steps it replaces.
w8a8 (models.w8a8) quantises the activations too, per token, with int8 weights per output
channel: ONNX Runtime's integer GEMM then serves a prefill or a verify of several tokens far
faster than MatMulNBits does, at twice int4's weight bytes for a k=1 step.

Each precision gets its own folder (int8/, int4/, w8a8/) with its own shared weights.bin and sha256s
in graphs.json. The fp32 graphs are the source; they and the fp16 set are left byte-identical.
`agreement` measures greedy chunks of a set against fp32 on the directory's recorded
stream.npz; `quantise` writes that into card.json under "quantised" (success in the cell is
added there by examples.conveyor_sorting.card_eval --precision).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

from rtinfer.inference.backends import get_backend
from rtinfer.inference.decode import Decoder
from rtinfer.inference.drafters import ChunkReuseDrafter, EarlyExitDrafter
from rtinfer.model.directory import ModelDir
from rtinfer.model.manifest import read_manifest, write_manifest
from rtinfer.model.sequence import build_prefix

from .share import listed_elsewhere, share_weights
from .w8a8 import quantise_w8a8

# precision -> MatMulNBits settings (block 32: the smallest block ORT's int8 kernels keep fast here)
SETTINGS = {"int8": {"bits": 8, "block_size": 32}, "int4": {"bits": 4, "block_size": 32}}
W8A8 = "w8a8"  # models.w8a8: int8 weights per channel, int8 activations per token
QUANTISED = (*SETTINGS, W8A8)  # every quantised precision, MatMulNBits' first
ACCURACY_LEVEL = 4  # MatMulNBits: int8 compute, activations quantised per row and block
STREAM = "stream.npz"


def quantise_graph(src, dst, bits: int, block_size: int) -> None:
    """One fp32 step graph (external weights are read) -> a MatMulNBits graph, weights inside."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # a line per node
    q = MatMulNBitsQuantizer(
        onnx.load(str(src)),
        bits=bits,
        block_size=block_size,
        is_symmetric=True,
        accuracy_level=ACCURACY_LEVEL,
        op_types_to_quantize=("MatMul",),
    )
    q.process()
    onnx.save(q.model.model, str(dst))


def quantise_as(src, dst, precision: str, manifest: dict | None = None) -> None:
    """The fp32 step graph `src` as a graph of `precision` at `dst`, with the settings the
    directory's set was written with (`manifest`'s "quantised"; default this module's)."""
    if precision == W8A8:
        quantise_w8a8(src, dst)
    else:
        quantise_graph(src, dst, **settings(manifest or {}, precision))


def settings(manifest: dict, precision: str) -> dict:
    """The MatMulNBits settings (bits, block_size) a directory's `precision` set was written
    with (graphs.json "quantised"), else this module's defaults."""
    got = manifest.get("quantised", {}).get(precision, {})
    return {k: got.get(k, SETTINGS[precision][k]) for k in ("bits", "block_size")}


def quantise(
    out_dir,
    precisions=("int8", "int4"),
    *,
    stream=None,
    card: bool = True,
    block_size: int | None = None,
) -> dict:
    """Write the `precisions` sets from out_dir's fp32 graphs, list them in graphs.json (an
    existing set of that precision is replaced), share each set's weights, and measure each
    against fp32 on `stream` (default out_dir/stream.npz; none: no agreement figures).
    card: also write the figures into out_dir/card.json "quantised" (replacing that
    precision's entry, success included: it was measured on the old graphs).
    block_size: K elements per scale (default SETTINGS': 32). Larger blocks stream fewer scale
    bytes and run faster (docs/benchmarks/compute.md: 128 at 100 M int4, a step 0.8x, a verify
    0.78x) at some agreement with fp32 (the shipped policy's int4 chunks 0.93 -> 0.90).
    A rewritten set's KV-rows twins and shared-k graphs are dropped with its old folder (write
    them again: python -m models.kv_rows / models.shared_k DIR). Returns {precision:
    {"settings", "bytes", "agreement"}}. Blocks for seconds (demo size)."""
    out = Path(out_dir)
    manifest = read_manifest(out)
    unknown = [p for p in precisions if p not in QUANTISED]
    if unknown:
        raise ValueError(f"cannot quantise to {unknown}; choose from {list(QUANTISED)}")
    fp32 = [g for g in manifest["graphs"] if g["dtype"] == "float32"]
    kept = [g for g in manifest["graphs"] if g["dtype"] not in precisions]
    weights = {
        n: d
        for n, d in manifest.get("weights", {}).items()
        if Path(n).parent.name not in precisions
    }
    tool = f"onnxruntime {onnxruntime.__version__} matmul_nbits_quantizer"
    if block_size is not None and (block_size < 16 or block_size & (block_size - 1)):
        raise ValueError(
            f"block_size {block_size}: MatMulNBits takes a power of two >= 16 "
            "(16, 32, 64, 128, 256)"
        )
    for prec in precisions:
        folder = out / prec
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        if prec == W8A8:
            manifest.setdefault("quantised", {})[prec] = {
                "method": "int8 weights per output channel, int8 activations per token "
                "(MatMulInteger)",
                "symmetric": True,
                "activation_zero_point": 128,
                "tool": f"rtinfer models.w8a8, onnxruntime {onnxruntime.__version__}",
            }
        else:
            chosen = {**SETTINGS[prec], **({"block_size": block_size} if block_size else {})}
            manifest.setdefault("quantised", {})[prec] = {
                "method": "MatMulNBits weight-only",
                **chosen,
                "symmetric": True,
                "accuracy_level": ACCURACY_LEVEL,
                "tool": tool,
            }
        for g in fp32:  # with the settings just recorded
            name = f"{prec}/{Path(g['file']).name}"
            quantise_as(out / g["file"], out / name, prec, manifest)
            kept.append({**g, "file": name, "dtype": prec, "sha256": None})
    for key in ("kv_rows", "shared_k"):  # a rewritten set's twins went with its folder
        if key in manifest:
            manifest[key] = listed_elsewhere(out, manifest, key, precisions)
    # a shipped folder keeps its fp32 weights in the checkpoint (models.checkpoint_blob)
    merged = "policy.safetensors" in weights and not (out / "weights.bin").exists()
    manifest["graphs"], manifest["weights"] = kept, weights
    write_manifest(out, manifest)
    share_weights(out)  # re-shares every folder: fp32 and fp16 come out byte-identical
    if merged:  # share_weights wrote the fp32 weights to weights.bin again: back into one file
        from .checkpoint_blob import merge

        merge(out)
    recorded = Path(stream) if stream else out / STREAM
    report = {}
    for prec in precisions:
        size = sum(f.stat().st_size for f in (out / prec).iterdir())
        report[prec] = {
            "settings": manifest["quantised"][prec],
            "bytes": size,
            "agreement": agreement(out, prec, recorded) if recorded.exists() else None,
        }
    if card and (out / "card.json").exists():
        c = json.loads((out / "card.json").read_text())
        c.setdefault("quantised", {}).update(report)
        (out / "card.json").write_text(json.dumps(c, indent=1))
    return report


def recorded_prefixes(md: ModelDir, stream) -> list[np.ndarray]:
    """The model prefixes of a recorded stream .npz (instruction_tokens, obs_tokens)."""
    with np.load(stream, allow_pickle=False) as z:
        pairs = zip(z["instruction_tokens"], z["obs_tokens"])
        return [build_prefix(md.vocab, instr, obs) for instr, obs in pairs]


def greedy_chunks(backend, prefixes, drafter: str = "none") -> np.ndarray:
    """Full-depth greedy chunk per prefix, (cycles, chunk tokens): plain ("none"), or
    speculative with the early-exit drafter ("self") or the previous cycle's chunk ("chunk")."""
    md = backend.model
    v, n, period = md.vocab, md.chunk_tokens, md.tokenizer.period_ns
    dec, out = Decoder(backend), np.zeros((len(prefixes), n), np.int64)
    d = {
        "none": None,
        "self": EarlyExitDrafter(min(backend.depths), v.action_start, v.action_stop),
        "chunk": ChunkReuseDrafter(md.tokenizer.horizon, md.tokenizer.dim),
    }[drafter]
    for i, prefix in enumerate(prefixes):
        backend.reset()
        logits = backend.prefill(prefix, 0)
        if drafter == "chunk" and i == 0:
            d.clear()
        elif drafter == "chunk":
            d.set_previous(out[i - 1], 0, period, period)
        out[i] = dec.decode(logits, len(prefix), n, drafter=d)
    return out


def agreement(model_dir, precision: str, stream=None) -> dict:
    """Greedy chunks of `precision` against fp32's on a recorded stream (ONNX Runtime, one
    thread): the fraction of tokens and of whole chunks that agree, of first tokens (the
    prefill's), and whether both speculative drafters reproduce the precision's own plain
    greedy token for token (`speculative_identical`)."""
    md = ModelDir.load(model_dir)
    prefixes = recorded_prefixes(md, stream or md.path / STREAM)
    ref = greedy_chunks(get_backend("onnx").load(md, precision="fp32"), prefixes)
    be = get_backend("onnx").load(md, precision=precision)
    got = greedy_chunks(be, prefixes)
    spec = all(bool((greedy_chunks(be, prefixes, d) == got).all()) for d in ("self", "chunk"))
    return {
        "stream": Path(stream or md.path / STREAM).name,
        "cycles": len(prefixes),
        "tokens": int(got.size),
        "token_agreement": float((got == ref).mean()),
        "chunk_agreement": float((got == ref).all(axis=1).mean()),
        "first_token_agreement": float((got[:, 0] == ref[:, 0]).mean()),
        "speculative_identical": spec,
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="model directory with fp32 step graphs")
    ap.add_argument("precisions", nargs="+", choices=list(QUANTISED))
    ap.add_argument("--stream", default=None, help="recorded stream .npz (default: the model's)")
    ap.add_argument("--no-card", action="store_true", help="leave card.json as it is")
    ap.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="K elements per scale (default 32; 128 is faster, a little less exact)",
    )
    a = ap.parse_args(argv)
    print(
        json.dumps(
            quantise(
                a.model, a.precisions, stream=a.stream, card=not a.no_card, block_size=a.block_size
            ),
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
