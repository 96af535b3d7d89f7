"""The join discontinuity of `rtinfer bench rtc`: at each chunk switch the robot made, how far
the new chunk's plan is from the old one's, per axis.

A switch is an applied cycle of the robot's trace (its `apply` stamp a) after another. Both
chunks are taken as the robot took them (every waypoint the recorder saw on the robot's own
action endpoint, keyed by cycle and capture), each waypoint i due at capture + start_ns +
i * period_ns. At t1, the new chunk's first waypoint due after a (the first the tracker
re-plans toward), the position jump is |new(t1) - old(t1)| and the velocity jump
|new'(t1) - old'(t1)|, per axis in the axis's units (m, m/s), where old(t) interpolates the
old chunk's waypoints linearly (its last one after its end, where the tracker holds) and a
chunk's velocity is its forward difference (0 at and after its last waypoint, as the
tracker ends a complete chunk at rest). A conditioned chunk whose t1 falls in its committed
prefix jumps 0 there by construction; the jump it makes is past the prefix, where it may.
"""

from __future__ import annotations

import numpy as np


def _at(due: np.ndarray, w: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Position and velocity of the piecewise-linear chunk (due [H] ns, w [H, A]) at t ns."""
    if t >= due[-1]:
        return w[-1], np.zeros(w.shape[1])
    if t <= due[0]:
        j, t = 0, due[0]
    else:
        j = int(np.searchsorted(due, t, side="right")) - 1
    s = (t - due[j]) / (due[j + 1] - due[j])
    pos = w[j] + s * (w[j + 1] - w[j])
    return pos, (w[j + 1] - w[j]) / ((due[j + 1] - due[j]) * 1e-9)


def _due(chunk: dict) -> np.ndarray:
    return (
        chunk["capture"]
        + chunk["start_ns"]
        + np.arange(len(chunk["values"]), dtype=np.float64) * chunk["period_ns"]
    )


def join_jumps(applied: list[tuple[int, tuple]], chunks: dict, axes: int) -> tuple:
    """applied: (apply_ns, chunk key) in apply order; chunks: key -> {"capture", "start_ns",
    "period_ns", "values" [H, D]}. Returns (position jumps [switches, axes], velocity jumps
    [switches, axes]); a switch whose chunks the recorder missed is left out."""
    pos, vel = [], []
    for (_, old_key), (a, new_key) in zip(applied, applied[1:]):
        old, new = chunks.get(old_key), chunks.get(new_key)
        if old is None or new is None or old_key == new_key:
            continue
        due_new = _due(new)
        ahead = np.nonzero(due_new > a)[0]
        if len(ahead) == 0:
            continue
        t1 = float(due_new[ahead[0]])
        p_new, v_new = _at(due_new, new["values"][:, :axes], t1)
        p_old, v_old = _at(_due(old), old["values"][:, :axes], t1)
        pos.append(np.abs(p_new - p_old))
        vel.append(np.abs(v_new - v_old))
    return np.array(pos).reshape(-1, axes), np.array(vel).reshape(-1, axes)


def spread(jumps: np.ndarray, names: list[str], digits: int = 4) -> dict:
    """{axis: {"p50", "p99", "max"}} over the switches (empty: None)."""
    if len(jumps) == 0:
        return {n: None for n in names}
    return {
        n: {
            k: round(float(f(jumps[:, i])), digits)
            for k, f in (
                ("p50", lambda x: np.percentile(x, 50)),
                ("p99", lambda x: np.percentile(x, 99)),
                ("max", np.max),
            )
        }
        for i, n in enumerate(names)
    }


def plot(result: dict, path: str) -> None:
    """Success and the position jump's p99 (worst axis) against the added delay, per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ok, jump) = plt.subplots(1, 2, figsize=(8, 3.2))
    for arm in dict.fromkeys(p["arm"] for p in result["points"]):
        pts = [p for p in result["points"] if p["arm"] == arm]
        delays = sorted({p["delay_ms"] for p in pts})
        at = [[p for p in pts if p["delay_ms"] == d] for d in delays]
        ok.plot(
            delays,
            [sum(p["correct"] for p in g) / max(1, sum(p["resolved"] for p in g)) for g in at],
            "o-",
            label=arm,
        )
        jump.plot(
            delays,
            [
                np.mean(
                    [
                        max((s or {"p99": np.nan})["p99"] for s in p["jump_pos_m"].values())
                        for p in g
                    ]
                )
                for g in at
            ],
            "o-",
            label=arm,
        )
    ok.set_xlabel("added round-trip delay (ms)")
    ok.set_ylabel("success (correct / resolved)")
    ok.set_ylim(-0.02, 1.05)
    jump.set_xlabel("added round-trip delay (ms)")
    jump.set_ylabel("join jump p99, worst axis (m)")
    for ax in (ok, jump):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
