"""The stress demo's threat, calibrated at start-up: a deadline the fixed full-depth policy
misses now, on this machine, and the budget controller's cheapest level still meets.

A fixed 20 ms deadline said nothing on a faster or less loaded host (0 misses either way),
and too much on a slower one. So `rtinfer demo --stress cpu` measures first:

- the policy's chunk time (observation in -> last waypoint out: a waypoint that reaches the
  controller later than the deadline is rejected and its cycle missed) at full depth and at
  the cheapest budget level, with the policy node's backend, threads and drafter (read from
  the launch file), on the model's recorded observation stream, paced at the policy rate;
- under the same CPU hogs the runs get, and with the two levels interleaved cycle by
  cycle, so both see the same load, other jobs on a shared host included.

The deadline is the full-depth p80 plus DELIVERY_MS (the obs and waypoint hops and the
controller's next 1 kHz tick): the fixed run is expected to miss about 20% of its cycles
(at least 5% wanted; a node under the sim's load too runs slower, not faster). It is kept
at or above the cheapest level's p99 x 1.15 + DELIVERY_MS, so that the budget controller
has a level that fits, and at or below the full-depth p90 + DELIVERY_MS. When those two
bounds cross, no deadline separates the two on this machine now: the deadline is the
upper bound and the threat says so (`separable` false).

`choose_deadline` is pure (samples in, a Threat out); `measure` reads the clock.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

DELIVERY_MS = 1.0      # capture -> policy, policy -> controller, and the next 1 kHz tick
AIM_Q = 0.80           # the deadline: this quantile of full depth (about 20% expected late)
CEIL_Q = 0.90          # never above this one (at least about 10% expected late)
FLOOR_Q, FLOOR_HEADROOM = 0.99, 1.15  # never below the cheapest level's p99 x 1.15
QUANTILES = (0.5, 0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Threat:
    deadline_ms: float
    separable: bool          # the cheapest level's bound sits below the full depth's
    fixed_late: float        # calibration: fraction of full-depth chunks past the deadline
    cheapest_late: float     # ... and of cheapest-level chunks
    full_ms: dict            # chunk time quantiles (p50, p80, ...), ms
    cheapest_ms: dict
    samples: int             # per level
    how: str                 # one line: how the deadline was chosen

    def report(self) -> dict:
        return asdict(self)


def _quantiles(x: np.ndarray) -> dict:
    return {f"p{round(q * 100)}": round(float(np.quantile(x, q)), 2) for q in QUANTILES}


def choose_deadline(full_ms, cheapest_ms, delivery_ms: float = DELIVERY_MS,
                    given_ms: float | None = None) -> Threat:
    """The deadline (ms) from chunk times (ms) measured at full depth and at the cheapest
    budget level: full p80 + delivery, clamped to [cheapest p99 x 1.15, full p90] + delivery
    (given_ms: the user's --deadline-ms instead, with the late fractions it implies).
    Raises ValueError on empty or non-finite samples."""
    full, low = np.asarray(full_ms, float), np.asarray(cheapest_ms, float)
    if full.size == 0 or low.size == 0 or not (np.isfinite(full).all() and np.isfinite(low).all()):
        raise ValueError("calibration needs finite chunk-time samples at both levels")
    aim = float(np.quantile(full, AIM_Q)) + delivery_ms
    ceil = float(np.quantile(full, CEIL_Q)) + delivery_ms
    floor = float(np.quantile(low, FLOOR_Q)) * FLOOR_HEADROOM + delivery_ms
    separable = floor <= ceil
    deadline = round(min(max(aim, floor), ceil), 1) if given_ms is None else float(given_ms)
    if given_ms is not None:
        how = "given by --deadline-ms (not calibrated)"
    elif not separable:
        how = (f"full-depth p90 + {delivery_ms:g} ms = {ceil:.1f} ms; no deadline separates the "
               f"levels now (the cheapest level's p99 x {FLOOR_HEADROOM:g} + {delivery_ms:g} ms "
               f"is {floor:.1f} ms): expect the budget controller to miss too")
    elif deadline == round(aim, 1):
        how = f"full-depth p80 + {delivery_ms:g} ms (chunk times measured under the same load)"
    elif aim < floor:
        how = (f"the cheapest level's p99 x {FLOOR_HEADROOM:g} + {delivery_ms:g} ms (above the "
               f"full-depth p80 + {delivery_ms:g} ms, {aim:.1f} ms)")
    else:
        how = f"full-depth p90 + {delivery_ms:g} ms"
    late = lambda x: round(float(np.mean(x + delivery_ms > deadline)), 4)  # noqa: E731
    return Threat(deadline, separable, late(full), late(low), _quantiles(full), _quantiles(low),
                  int(min(full.size, low.size)), how)


def node_options(policy_args) -> dict:
    """The policy node's --backend, --threads and --drafter from its launch-file args."""
    args, out = list(policy_args), {"backend": "onnx", "threads": 1, "drafter": "chunk"}
    for flag, key, cast in (("--backend", "backend", str), ("--threads", "threads", int),
                            ("--drafter", "drafter", str)):
        if flag in args[:-1]:
            out[key] = cast(args[args.index(flag) + 1])
    return out


def measure(model_dir: Path, cycles: int, *, backend: str = "onnx", threads: int = 1,
            drafter: str = "chunk", stopped: Callable[[], bool] = lambda: False
            ) -> tuple[list[float], list[float]]:
    """Chunk times (ms, observation -> last waypoint) at full depth and at the cheapest
    budget level, `cycles` each (fewer if `stopped()` turns true), interleaved: one runner
    per level, each paced at the policy period, the other level's cycle half a period
    later. Blocks for about cycles x period."""
    # onnxruntime is the node extra: loaded only when a stress demo runs a model
    from rtinfer.bench.decode import token_stream
    from rtinfer.inference.budget import default_levels
    from rtinfer.inference.runner import ChunkRunner
    from rtinfer.model.directory import ModelDir

    md = ModelDir.load(model_dir)
    opts = {"threads": threads} if backend == "onnx" else {}
    runners = [ChunkRunner(md, backend=backend, backend_opts=opts, drafter=drafter)
               for _ in range(2)]
    levels = default_levels(md, runners[0].decoder.k_verify)
    pair = (levels[0], levels[-1])
    stream = list(token_stream(md, cycles + 4, seed=0))
    period = md.tokenizer.period_ns
    times: tuple[list[float], list[float]] = ([], [])
    mark = [0]
    next_ns = time.monotonic_ns()
    for i in range(len(stream) * 2):
        if stopped():
            break
        which = i % 2
        instr, obs = stream[(i // 2) % len(stream)]
        next_ns = max(next_ns + period // 2, time.monotonic_ns())  # an overrun: no catch-up burst
        time.sleep(max(0.0, (next_ns - time.monotonic_ns()) / 1e9))
        t0 = time.monotonic_ns()
        runners[which].run(instr, obs, t0, pair[which],
                           lambda _i, _b: mark.__setitem__(0, time.monotonic_ns()))
        if i >= 8:  # the first cycles warm the graphs and the prefix cache
            times[which].append((mark[0] - t0) / 1e6)
    return times


def late_fraction(run: dict) -> float | None:
    """A run's cycles delivered late (the monitor's deadline misses) over its cycles."""
    misses, cycles = run.get("deadline_misses"), run.get("cycles")
    return round(misses / cycles, 4) if misses is not None and cycles else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _sorted(run: dict) -> str:
    o, rate = run.get("objects", {}), run.get("success_rate")
    resolved = sum(o.get(k, 0) for k in ("correct", "wrong", "missed", "dropped"))
    return f"{o.get('correct', 0)}/{resolved}" + ("" if rate is None else f" ({100 * rate:.1f}%)")


def stress_table(results: dict):
    """The two stress runs side by side (a rich Table), with the calibrated threat."""
    from rich.table import Table

    fixed, budget = results.get("stress-fixed", {}), results.get("stress-budget", {})
    threat = results.get("calibration")
    title = "fixed full depth vs the budget controller"
    if threat:
        title += f": deadline {threat['deadline_ms']:g} ms ({threat['how']})"
    t = Table(title=title, title_justify="left")
    for col in ("", "fixed full depth", "budget controller"):
        t.add_column(col, justify="left" if not col else "right")
    if threat:
        t.add_row("late in calibration", _pct(threat["fixed_late"]), _pct(threat["cheapest_late"])
                  + " (cheapest level)")
        t.add_row("chunk p50 / p95 (calibration)",
                  f"{threat['full_ms']['p50']:.1f} / {threat['full_ms']['p95']:.1f} ms",
                  f"{threat['cheapest_ms']['p50']:.1f} / {threat['cheapest_ms']['p95']:.1f} ms")

    def row(label, f):
        t.add_row(label, *(f(r) if r else "-" for r in (fixed, budget)))

    row("cycles late", lambda r: f"{r.get('deadline_misses')} / {r.get('cycles')} "
                                 f"({_pct(late_fraction(r))})")
    row("late waypoints (rejected)", lambda r: str(r.get("late_waypoints")))
    row("e2e p50 / p99 / max", lambda r: " / ".join(
        "-" if r["e2e_ms"].get(k) is None else f"{r['e2e_ms'][k]:.1f}" for k in
        ("p50", "p99", "max")) + " ms")
    row("sorted", _sorted)
    row("budget changes", lambda r: str(r.get("budget_changes")))
    row("watchdog holds", lambda r: str(r.get("holds", {}).get("watchdog")))
    return t
