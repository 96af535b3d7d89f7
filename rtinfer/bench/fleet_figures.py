"""`rtinfer bench fleet`'s figures, from the bench robots' records (controllers.bench_robot):
deadline met, e2e, chunks per node CPU second, refused, identical to plain greedy (each
defined in rtinfer.bench.fleet's module doc), and the plot of deadline met against N."""

from __future__ import annotations

import json

import numpy as np

from rtinfer.model.obs_stream import load_bodies
from rtinfer.realtime.hist import LatencyHistogram

ARRANGEMENTS = ("batched", "sequential", "separate")
REJECTED = ("rejected_stale", "rejected_dest", "rejected_bad", "rejected_hash")


def summarise(raw: dict, greedy, seconds: float) -> dict:
    """The arrangement's figures from its robots' records (see the module doc)."""
    recs = raw["records"]
    answered = [r for r in recs if r["received"].sum() > 0]
    hist, cycles, met, same, checked = LatencyHistogram(), 0, 0, 0, 0
    per_robot = []  # each robot's deadline met over all its cycles (refused: missed)
    for r in answered:
        # a robot's cycles count from its first answer on (before it: refused, said apart)
        first = int(np.flatnonzero(r["received"] > 0)[0])
        ok = ((r["count"] > 0) & (r["accepted"] == r["count"]))[first:]
        cycles += len(ok)
        met += int(ok.sum())
        per_robot.append(int(ok.sum()) / max(1, len(r["count"])))
        for row in np.flatnonzero((r["count"] > 0) & (r["received"] == r["count"])):
            hist.record(int(r["last_recv_ns"][row] - r["capture_ns"][row]))
        for row in first + np.flatnonzero(ok):
            c = r["count"][row]
            checked += 1
            same += np.array_equal(r["tokens"][row][:c], greedy(int(r["stream_index"][row]))[:c])
    p = hist.percentiles_us()
    all_cycles = sum(len(r["count"]) for r in recs)
    return {
        "deadline_met": round(met / cycles, 4) if cycles else None,
        "e2e_p50_ms": round(p["p50"] / 1e3, 2) if hist.count else None,
        "e2e_p99_ms": round(p["p99"] / 1e3, 2) if hist.count else None,
        "chunks_per_cpu_s": round(met / raw["node_cpu_s"], 1) if raw["node_cpu_s"] else None,
        "refused": max(
            raw["robots_refused"] - raw["robots_admitted_late"], len(recs) - len(answered)
        ),
        "identical": round(same / checked, 4) if checked else None,
        "deadline_met_all_robots": round(met / all_cycles, 4) if all_cycles else None,
        "deadline_met_worst_robot": round(
            min(per_robot + [0.0] * (len(recs) - len(answered)), default=0.0), 4
        ),
        "cycles": cycles,
        "chunks_accepted": met,
        "chunks_checked": checked,
        "node_cpu_s": round(raw["node_cpu_s"], 2),
        "node_cpu_share": round(raw["node_cpu_s"] / seconds, 3),
        "robot_cpu_s": round(raw["robot_cpu_s"], 2),
        "robots_answered": len(answered),
        "robots_admitted_late": raw["robots_admitted_late"],
        "overloads": raw.get("overloads", 0),
        "refused_cycles": all_cycles - cycles,
        "refusals": raw["refusals"][:3],
        "robot_rejected": {
            k: sum(json.loads(str(r["counters"]))[k] for r in recs) for k in REJECTED
        },
    }


class Greedy:
    """Plain greedy tokens (H, D) of stream row i, decoded once per row (lazily: the model
    loads at the first call)."""

    def __init__(self, model: str, stream: str) -> None:
        self.model, self.stream, self.cache = model, stream, {}
        self.runner = None

    def __call__(self, index: int) -> np.ndarray:
        if index not in self.cache:
            if self.runner is None:
                self._load()
            instr, obs = self.md.obs.encode(self.bodies[index])
            bins, _ = self.runner.run(instr, obs, None, self.level)
            self.cache[index] = bins.reshape(-1, self.md.tokenizer.dim).copy()
        return self.cache[index]

    def _load(self) -> None:
        from rtinfer.inference.budget import default_levels
        from rtinfer.inference.runner import TokenRunner
        from rtinfer.model.chunk_model import load_model

        self.md = load_model(self.model)
        self.runner = TokenRunner(self.md, drafter="none", backend_opts={"threads": 1})
        self.level = default_levels(self.md, self.runner.decoder.k_verify)[0]
        self.bodies = load_bodies(self.stream)


def plot(result: dict, path: str) -> None:
    """deadline_met against N, one line per arrangement measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ns = [r["robots"] for r in result["rows"]]
    for arrangement in (a for a in ARRANGEMENTS if a in result["rows"][0]):
        (line,) = ax.plot(
            ns,
            [r[arrangement]["deadline_met"] for r in result["rows"]],
            "o-",
            label=f"{arrangement} (admitted robots)",
        )
        if any(r[arrangement]["refused"] for r in result["rows"]):
            ax.plot(
                ns,
                [r[arrangement]["deadline_met_all_robots"] for r in result["rows"]],
                "o--",
                color=line.get_color(),
                alpha=0.6,
                label=f"{arrangement} (all robots: refused = missed)",
            )
        for r in result["rows"]:
            if r[arrangement]["refused"]:
                ax.annotate(
                    f"{r[arrangement]['refused']} refused",
                    (r["robots"], 1.0),
                    textcoords="offset points",
                    xytext=(0, 6),
                    fontsize=7,
                    ha="center",
                    color=line.get_color(),
                )
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlim(min(ns) / 1.3, max(ns) * 1.3)
    ax.set_ylim(-0.02, 1.1)
    ax.set_xlabel(f"robots at {result['rate_hz']:g} Hz each")
    ax.set_ylabel(f"deadline met ({result['deadline_ms']:g} ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
