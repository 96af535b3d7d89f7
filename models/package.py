"""Turn a trained checkpoint into a model directory the inference node loads.

    rtinfer export --checkpoint runs/conveyor-v1/policy --out models/zoo/conveyor-v1

Writes the ONNX step graphs (fp32 and fp16, and with --quantise int8/int4 weight-quantised
sets: models.quantise) with graphs.json, tokenizer.json, obs_tokens.json and card.json
(training facts, per-exit token accuracy, export parity, each quantised set's greedy
agreement with fp32 on stream.npz when the folder has one). Success rates are added to the
card by examples.conveyor_sorting.card_eval (they need the cell).
"""

from __future__ import annotations

import json
from pathlib import Path

from rtinfer.model import sequence
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.model.obs_tokens import ObsTokens

from . import checkpoint
from .export import export_all
from .quantise import quantise as quantise_sets
from .share import share_weights
from .shared_k import export_shared_k

K_VERIFY = 8


def package(
    ckpt_path,
    out_dir,
    *,
    k_verify: int = K_VERIFY,
    fp16: bool = True,
    exit_prefill: tuple[int, ...] = (),
    quantise: tuple[str, ...] = (),
    stream=None,
    shared_k: bool = True,
) -> dict:
    """quantise: precisions ("int8", "int4", "w8a8") to add beside fp32; stream: the recorded
    .npz their agreement is measured on (default out_dir/stream.npz, if there). shared_k: also
    one graph per depth with the token count free, for fp32 and each quantised set
    (models.shared_k: the ONNX backend runs every k of a depth in one session)."""
    ck = checkpoint.load(ckpt_path)
    meta, cfg, vocab = ck.meta, ck.cfg, ck.vocab
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = TokenizerConfig.from_dict(meta["tokenizer_config"])
    spec = meta["obs_tokens_spec"]
    obs_tokens = ObsTokens(spec)
    c, n_obs = obs_tokens.instr_length, obs_tokens.length
    # Prefill graphs: the instruction prefix (cached), the per-cycle observation segment,
    # and the whole prefix (for running without the prefix cache); with exit_prefill, the
    # observation segment at those exit depths too (their budget levels prefill there).
    prefixes = [1 + c, n_obs + 1, sequence.prefix_len(c, n_obs)]
    parity = export_all(
        ck.model,
        cfg,
        out,
        k_verify=k_verify,
        prefix_len=prefixes,
        vocab=vocab,
        fp16=fp16,
        exit_prefills=[(e, n_obs + 1) for e in exit_prefill],
    )
    sizes = share_weights(out)
    tok.save(out / "tokenizer.json")
    (out / "obs_tokens.json").write_text(json.dumps(spec, indent=1))
    checkpoint.save(out / "policy", ck.model, vocab, meta)
    card = {
        "name": out.name,
        "params": ck.model.num_params(),
        "config": cfg.to_dict(),
        "files": sizes,
        "training": {
            k: meta.get(k)
            for k in (
                "train_rows",
                "val_rows",
                "steps",
                "batch",
                "train_seconds",
                "finetune_seconds",
                "finetune_steps",
                "seed",
                "sparsity",
                "held_out_instructions",
                "init",
                "data",
            )
        },
        "val_token_accuracy": meta.get("val_token_accuracy"),
        "parity": {
            "greedy_tokens_identical": {
                dt: parity.get(f"greedy_{dt}", {}).get("match") for dt in ("float32", "float16")
            },
            "max_logit_diff": {n: g.get("max_abs_logits") for n, g in parity["graphs"].items()},
            "weights_24": {n: g.get("weights_24") for n, g in parity["graphs"].items()},
        },
    }
    if quantise:
        card["quantised"] = quantise_sets(out, quantise, stream=stream, card=False)
    if shared_k:
        card["shared_k"] = export_shared_k(out, policy=ck.model)
    (out / "card.json").write_text(json.dumps(card, indent=1))
    return card


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="checkpoint path without extension")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-fp16", action="store_true")
    ap.add_argument(
        "--exit-prefill",
        type=int,
        nargs="*",
        default=[],
        help="exit depths whose budget levels prefill there too",
    )
    ap.add_argument(
        "--quantise",
        nargs="*",
        default=[],
        choices=["int8", "int4", "w8a8"],
        help="quantised graph sets to add beside fp32 (models.quantise)",
    )
    ap.add_argument(
        "--no-shared-k", action="store_true", help="no shared-k graphs (models.shared_k)"
    )
    a = ap.parse_args(argv)
    card = package(
        a.checkpoint,
        a.out,
        fp16=not a.no_fp16,
        exit_prefill=tuple(a.exit_prefill),
        quantise=tuple(a.quantise),
        shared_k=not a.no_shared_k,
    )
    print(json.dumps({k: card[k] for k in ("name", "params", "val_token_accuracy")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
