"""Markdown for the peers benchmark: one section between `<!-- peers:begin -->` and
`<!-- peers:end -->` in docs/benchmarks/peers.md, stating machine, date, versions, counts and the
exact command next to the figures."""

from __future__ import annotations

BEGIN, END = "<!-- peers:begin -->", "<!-- peers:end -->"


def _f(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


def _cmp_table(rows: list[dict]) -> list[str]:
    out = [
        "| row | variant | peer | unit | rtinfer p50 | peer p50 | rtinfer p99 | peer p99 "
        "| speedup p50 | speedup p99 | target p50 | met | runs (rtinfer/peer) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        if not r.get("peer_available", True):
            out.append(
                f"| {r['name']} | - | {r['peer']} | - | - | - | - | - | - | - | - | - "
                f"| skipped: {r.get('skipped', '')} |"
            )
            continue
        runs = r.get("runs") or {}
        out.append(
            "| "
            + " | ".join(
                _f(x)
                for x in (
                    r["name"],
                    r.get("variant"),
                    f"{r['peer']} {r.get('peer_version') or ''}".strip(),
                    r["unit"],
                    r["rtinfer_p50"],
                    r["peer_p50"],
                    r["rtinfer_p99"],
                    r["peer_p99"],
                    r["speedup_p50"],
                    r["speedup_p99"],
                    r.get("target_speedup_p50"),
                    r.get("target_met"),
                    f"{runs.get('rtinfer', '-')}/{runs.get('peer', '-')}",
                )
            )
            + " |"
        )
    return out


def section(result: dict) -> str:
    m, rows = result["machine"], result["rows"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    by = lambda name: [r for r in rows if r["name"] == name]  # noqa: E731
    cmp_rows = [r for r in rows if r["name"] not in ("spec_vs_theory", "decode_vs_bandwidth_floor")]
    lines = [
        BEGIN,
        "## rtinfer vs what users would pick instead",
        "",
        f"Measured {m['date']} on {m['cores']} cores ({m['cpu_model']}), "
        f"Python {m['python']}, {m['platform']}.",
        f"Versions: {versions}.",
        f"Command: `{result['command']}`.",
        f"Counts: {result['counts']}. Model: {result.get('model', '-')}.",
        "",
        "speedup = peer / rtinfer (above 1: rtinfer is lower). Latency rows are in us.",
        "",
    ]
    lines += _cmp_table(cmp_rows)
    zen = [r for r in by("transport_vs_zenoh") if r.get("peer_available", True)]
    if zen:
        raw = "; ".join(
            f"{r['variant']} {_f(r.get('raw_pyzmq_p50'))}/{_f(r.get('raw_pyzmq_p99'))}" for r in zen
        )
        lines += [
            "",
            "Zenoh target: rtinfer within 1.5x of Zenoh at p50 (speedup >= 0.667). "
            "Raw pyzmq with the same bytes and no wire work, p50/p99 (us): " + raw + ".",
        ]
    loop = [r for r in by("loop_vs_naive_sleep") if r.get("peer_available", True)]
    if loop:
        lines += [
            "",
            "Loop lateness p99.9 (us): "
            + "; ".join(
                f"{r['variant']}: rtinfer {_f(r['rtinfer_p999'])} vs naive {_f(r['peer_p999'])} "
                f"(RateKeeper without SCHED_FIFO: p99 {_f(r['ratekeeper_no_fifo_p99'])}, "
                f"p99.9 {_f(r['ratekeeper_no_fifo_p999'])}; SCHED_FIFO {r['sched_fifo']})"
                for r in loop
            )
            + ".",
        ]
    spec = by("spec_vs_theory")
    if spec:
        lines += [
            "",
            "| drafter | alpha (MLE) | mean gamma | measured tokens/verify "
            "| theory (1-a^(g+1))/(1-a) | measured/theory | verifies | identical |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        lines += [
            "| "
            + " | ".join(
                _f(r.get(k))
                for k in (
                    "variant",
                    "alpha",
                    "mean_gamma",
                    "measured_tokens_per_verify",
                    "theory_tokens_per_verify",
                    "measured_over_theory",
                    "verifies",
                    "identical",
                )
            )
            + " |"
            for r in spec
        ]
    for r in by("decode_vs_bandwidth_floor"):
        if r.get("peer_available", True):
            lines += [
                "",
                f"Decode vs bandwidth floor (bench size, {r['backend']}, {r['threads']} "
                f"thread): p50 {_f(r['rtinfer_p50'])} us, p99 {_f(r['rtinfer_p99'])} us; "
                f"floor {_f(r['floor_us'])} us = {r['weight_bytes']:,} B / "
                f"{r['copy_bandwidth_gbs']} GB/s; decode/floor = "
                f"{r['decode_over_floor']} ({r['steps']} steps).",
            ]
        else:
            lines += ["", f"Decode vs bandwidth floor: {r.get('skipped')}."]
    notes = {
        f"{r['name']} ({k.replace('_', ' ')})": r[k]
        for r in rows
        for k in ("note", "peer_settings")
        if r.get(k)
    }
    if notes:
        lines += ["", "Notes:"] + [f"- {k}: {v}" for k, v in notes.items()]
    return "\n".join(lines + ["", END])


def replace_section(text: str, new: str) -> str:
    """`text` with its peers section replaced by `new` (appended when absent)."""
    i, j = text.find(BEGIN), text.find(END)
    if i >= 0 and j > i:
        return text[:i] + new + text[j + len(END) :]
    return text.rstrip("\n") + "\n\n" + new + "\n"
