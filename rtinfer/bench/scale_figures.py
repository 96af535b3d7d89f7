"""The scale bench's table (rich) and plots (matplotlib): chunk time against parameters per
precision, and the cost sweep's chunk time against each swept length."""

from __future__ import annotations

from pathlib import Path

COLOURS = {"fp32": "tab:blue", "int8": "tab:orange", "int4": "tab:green"}


def print_table(result: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(
        title=f"scale: chunk time (prefill + {16}-token chunk), deadline "
        f"{result['deadline_ms']:.0f} ms, fixed overheads "
        f"{result['fixed_overheads_ms']:.1f} ms, {result['threads']} thread(s)"
    )
    for col in (
        "params",
        "prec",
        "method",
        "p50 ms",
        "p99 ms",
        "full-KV p50",
        "prefill",
        "step",
        "/floor",
        "verify",
        "/floor",
        "exit p99",
        "eager",
        "proj",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for r in result["rows"]:
        ex, full = r.get("exit_chunk_p99_ms"), r.get("kv_full_chunk_p50_ms")
        t.add_row(
            f"{r['params'] / 1e6:.1f}M",
            r["precision"],
            r["method"][:5],
            f"{r['chunk_p50_ms']:.1f}",
            f"{r['chunk_p99_ms']:.1f}",
            "-" if full is None else f"{full:.1f}",
            f"{r['prefill_p50_ms']:.1f}",
            f"{r['step_p50_ms']:.2f}",
            f"{r['floors']['step']['over_floor']:.2f}",
            f"{r['verify_p50_ms']:.2f}",
            f"{r['floors']['verify']['over_floor']:.2f}",
            "-" if ex is None else f"{ex:.1f}",
            f"{r['torch_eager_chunk_ms']:.1f}",
            "yes" if r["projected"] else "",
        )
    p = result["largest_params_meeting_deadline"]
    t.caption = (
        f"largest measured policy meeting the deadline: "
        f"{'none' if p is None else f'{p / 1e6:.1f} M params'}"
    )
    console.print(t)


def plot(result: dict, path) -> Path:
    """Chunk p99 (solid: measured plain; dashed: speculative, hollow where projected) against
    parameters, one colour per precision, with the deadline less the fixed overheads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    rows = result["rows"]
    for prec, colour in COLOURS.items():
        for method, style in (("plain", "-"), ("speculative", "--")):
            sel = sorted(
                (r for r in rows if r["precision"] == prec and r["method"] == method),
                key=lambda r: r["params"],
            )
            if not sel:
                continue
            x = [r["params"] for r in sel]
            ax.plot(
                x,
                [r["chunk_p99_ms"] for r in sel],
                style,
                color=colour,
                label=f"{prec} {method} p99",
            )
            for r in sel:
                ax.plot(
                    r["params"],
                    r["chunk_p99_ms"],
                    "o",
                    color=colour,
                    mfc="white" if r["projected"] else colour,
                )
    budget = result["deadline_ms"] - result["fixed_overheads_ms"]
    ax.axhline(budget, color="red", lw=1)
    ax.text(
        0.01,
        budget * 1.05,
        f"deadline {result['deadline_ms']:.0f} ms - overheads "
        f"{result['fixed_overheads_ms']:.1f} ms",
        color="red",
        fontsize=8,
        transform=ax.get_yaxis_transform(),
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="parameters",
        ylabel="chunk time p99, ms (prefill + 16 tokens)",
        title=f"chunk time against model size, ONNX Runtime CPU, {result['threads']} thread",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, title="hollow: projected", title_fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    if "sweep" in result:
        plot_sweep(result["sweep"], out.with_name(out.stem + "-sweep" + out.suffix))
    plt.close(fig)
    return out


def plot_sweep(sweep: dict, path) -> Path:
    """Chunk p50 against the swept lengths, one panel per variable (cached and uncached
    instruction for the instruction-length panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sweep["points"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4), sharey=True)
    for ax, (var, pts) in zip(axes, panels.items()):
        for mode in sorted({p.get("prefix", "cached") for p in pts}):
            sel = [p for p in pts if p.get("prefix", "cached") == mode]
            ax.plot([p["value"] for p in sel], [p["chunk_p50_ms"] for p in sel], "o-", label=mode)
        ax.set(xlabel=sweep["labels"][var], title=var)
        ax.grid(True, alpha=0.3)
        if len({p.get("prefix", "cached") for p in pts}) > 1:
            ax.legend(fontsize=7)
    axes[0].set_ylabel("chunk time p50, ms")
    fig.suptitle(
        f"where the cost grows: {sweep['rung']} ({sweep['params'] / 1e6:.0f} M) "
        f"{sweep['precision']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
