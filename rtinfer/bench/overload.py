"""More robots than one node serves at full quality: goodput and the worst robot's service.

Calibration: the real policy (--model, through ONNX Runtime as the node runs it) decodes the
model's recorded observations (obs_stream.npz) at each budget level, --rounds cycles each,
with each robot's previous chunk carried as the node carries it; each level's median and
the spread of the level-0 cycles around their median (preemptions included: the machine's
load is in the figures) make the replay's cost model. Replay: robots 1..N (--robots) at
rates drawn from --rates-hz (seeded; one arrival set per N, the same for every rule), fed
through the real rtinfer.inference.robots.Robots on a simulated clock
(rtinfer.bench.overload_replay) with each rule in the same run: `before` (earliest deadline
first at each robot's own level, no degrade: the rule before overload degraded) and the
degrading schedule with `edf`, `llf`, `wait` and `guard` orders (rtinfer.inference.schedule).

Per point and rule: offered_hz (observations per second sent), goodput_hz (chunks applied in
time per second, summed over robots), worst_gap_ms (the longest a robot went without one),
worst_over_limit (that gap over the robot's staleness limit: <= 1 is every robot in time),
late (cycles run that ended past the deadline: wasted), refused, level_mix (share of the
applied chunks per level). Summary per rule: full_hz (chunks a second the node answers at
full quality: 1 / level 0's median, times --busy), goodput at the first point offering 2x that
over the peak goodput of the sweep and over the peak of the points up to it (a collapse shows
in the latter; a curve still rising past 2x only in the former), and the worst robot over its
limit at any point.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np

from rtinfer.bench.options import DEFAULT_MODEL, emit, parser
from rtinfer.bench.overload_replay import CostModel, replay, synthetic
from rtinfer.inference.budget import Budget
from rtinfer.inference.robots import Robots
from rtinfer.realtime.deadline import DEADLINE_MS

MS = 1_000_000
RULES = {
    "before": dict(rule="edf", degrade=False),
    "edf": dict(rule="edf"),
    "llf": dict(rule="llf"),
    "wait": dict(rule="wait"),
    "guard": dict(rule="guard"),
}


def calibrate(model: str, rounds: int, threads: int = 1) -> tuple[dict, list]:
    """Each budget level's cycle cost on this machine (module doc): (level_ms (medians),
    spread (level-0 cycles over their median), period_ms, levels (their descriptions);
    the policy's BudgetLevels)."""
    from rtinfer.inference.cycle import Cycle
    from rtinfer.inference.node_config import InferenceNodeConfig
    from rtinfer.inference.policy import load_policy
    from rtinfer.model.obs_stream import FILE, load_bodies

    policy = load_policy(model, InferenceNodeConfig(threads=threads, batch=1), {}, 1)
    stream = Path(model) / FILE
    bodies = load_bodies(stream) if stream.is_file() else []
    inputs = [policy.encode(b) for b in bodies[:64]] or [policy.sample_inputs()]
    medians, spread = [], []
    for index, level in enumerate(policy.levels):
        times, previous = [], None
        for k in range(3 + rounds):
            cycle = Cycle(k, {}, None, level, level.chunk, "bench", previous)
            t0 = time.perf_counter_ns()
            policy.run([(cycle, inputs[k % len(inputs)])])
            if k >= 3:
                times.append(time.perf_counter_ns() - t0)
            previous = cycle.previous
        med = float(np.median(times))
        medians.append(med)
        if index == 0:
            spread = [round(t / med, 3) for t in times]
    return {
        "level_ms": [m / MS for m in medians],
        "spread": spread,
        "period_ms": policy.period_ns / MS,
        "levels": [
            f"depth {lv.depth}, spec {lv.spec_len}, chunk {lv.chunk}"
            + (f", gate {lv.gate}" if lv.gate else "")
            for lv in policy.levels
        ],
        "rounds": rounds,
    }, policy.levels


def card_costs(model: str, cal: dict, levels) -> dict:
    """The calibration with each level's cost from the model card's measured chunk CPU ms
    (card.json level_success, a quiet machine's figures) and no spread: the quiet reference.
    KeyError: a level the card did not measure."""
    import json

    from rtinfer.inference.budget import level_key, measured_levels

    card = json.loads((Path(model) / "card.json").read_text())
    measured = measured_levels(card, max(lv.spec_len for lv in levels) + 1)
    return {
        **cal,
        "level_ms": [measured[level_key(lv)][1] for lv in levels],
        "spread": [1.0],
        "source": "card.json level_success chunk_cpu_ms",
    }


def sweep(
    cal: dict,
    robots: list[int],
    rates: list[float],
    seconds: float,
    seed: int,
    deadline_ms: float,
    levels,
    busy: float = 1.0,
) -> dict:
    """Every rule on the same arrivals at every N (module doc); busy: every cycle costs
    that many times its calibration once the robots are admitted (profiled at 1x)."""
    costs = CostModel(
        [int(m * MS) for m in cal["level_ms"]],
        spread=cal["spread"] or [1.0],
        busy_from_ns=0 if busy != 1.0 else None,
        busy_factor=busy,
    )
    deadline_ns = int(deadline_ms * MS)
    rows = []
    for n in robots:
        rng = random.Random(seed * 1000 + n)
        hz = {f"r{i}": rng.choice(rates) for i in range(n)}
        arrivals = synthetic(hz, seconds, seed=seed * 1000 + n, jitter_ns=MS)
        row = {"robots": n, "offered_hz": round(len(arrivals) / seconds, 1), "rules": {}}
        for name, kw in RULES.items():
            r = Robots(
                Budget(levels, deadline_ns),
                remote=False,
                period_ns=int(cal["period_ms"] * MS),
                say=lambda *a, **k: None,
                **kw,
            )
            res = replay(r, arrivals, costs, deadline_ns=deadline_ns, seed=seed)
            row["rules"][name] = {
                k: (round(v, 3) if isinstance(v, float) else v)
                for k, v in res.items()
                if k != "robots"
            }
            row["rules"][name]["level_mix"] = {k: round(v, 3) for k, v in res["level_mix"].items()}
        rows.append(row)
    full_hz = 1e3 / (cal["level_ms"][0] * busy)
    summary = {}
    for name in RULES:
        gp = [row["rules"][name]["goodput_hz"] for row in rows]
        twice = next((row for row in rows if row["offered_hz"] >= 2 * full_hz), None)
        upto = [
            row["rules"][name]["goodput_hz"]
            for row in rows
            if twice is None or row["offered_hz"] <= twice["offered_hz"]
        ]
        summary[name] = {
            "peak_goodput_hz": max(gp),
            "goodput_at_2x_over_peak": None
            if twice is None
            else round(twice["rules"][name]["goodput_hz"] / max(gp), 3),
            "goodput_at_2x_over_peak_up_to_2x": None
            if twice is None
            else round(twice["rules"][name]["goodput_hz"] / max(upto), 3),
            "worst_over_limit": max(row["rules"][name]["worst_over_limit"] for row in rows),
            "late": sum(row["rules"][name]["late"] for row in rows),
            "refused_max": max(row["rules"][name]["refused"] for row in rows),
        }
    return {"full_hz": round(full_hz, 1), "rows": rows, "summary": summary}


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    x = [row["offered_hz"] for row in result["rows"]]
    for name in RULES:
        ax1.plot(x, [row["rules"][name]["goodput_hz"] for row in result["rows"]], "o-", label=name)
        ax2.plot(
            x, [row["rules"][name]["worst_gap_ms"] for row in result["rows"]], "o-", label=name
        )
    for ax in (ax1, ax2):
        ax.axvline(result["full_hz"], color="grey", ls=":", label="full quality's capacity")
        ax.axvline(2 * result["full_hz"], color="grey", ls="--", label="2x")
        ax.set_xlabel("offered observations / s")
    ax1.set_ylabel("goodput: chunks applied in time / s")
    ax2.set_ylabel("worst robot's longest gap without one (ms)")
    ax2.set_yscale("log")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench overload`: robots 1..32 at 10-20 Hz on one node, each rule replayed."""
    p = parser("overload", main.__doc__)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 20, 24, 28, 32])
    p.add_argument("--rates-hz", type=float, nargs="+", default=[10.0, 12.5, 15.0, 17.5, 20.0])
    p.add_argument("--seconds", type=float, default=20.0, help="replayed seconds per point")
    p.add_argument("--rounds", type=int, default=200, help="timed cycles per level")
    p.add_argument("--deadline-ms", type=float, default=DEADLINE_MS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="40 rounds, 4 s points (tests)")
    p.add_argument("--plot", default=None, help="write goodput and worst gap (PNG)")
    p.add_argument(
        "--busy",
        type=float,
        default=1.0,
        help="cycles cost this many times their "
        "calibration after the start-up profile (a CPU-bound process beside the "
        "node: about 2 on one core)",
    )
    p.add_argument(
        "--card-costs",
        action="store_true",
        help="replay on the level costs the "
        "model card measured on a quiet machine (chunk CPU ms), not this machine's",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.rounds, a.seconds = 40, 4.0
    if min(a.robots) < 1 or min(a.rates_hz) <= 0:
        p.error("--robots at least 1 each, --rates-hz above 0")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    cal, levels = calibrate(a.model, a.rounds)
    if a.card_costs:
        try:
            cal = card_costs(a.model, cal, levels)
        except (OSError, KeyError):
            p.error(
                f"--card-costs: {a.model}/card.json has no level_success for every level "
                f"(python -m examples.conveyor_sorting.card_eval MODEL --levels)"
            )
    result = {
        "model": a.model,
        "loadavg": load,
        "calibration": cal,
        "seconds": a.seconds,
        "deadline_ms": a.deadline_ms,
        "rates_hz": a.rates_hz,
        "seed": a.seed,
        "busy": a.busy,
        **sweep(cal, a.robots, a.rates_hz, a.seconds, a.seed, a.deadline_ms, levels, a.busy),
    }
    if a.plot:
        plot(result, a.plot)
    return emit("overload", result, a.json)
