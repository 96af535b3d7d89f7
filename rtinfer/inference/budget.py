"""Compute budget: anytime inference under a deadline.

A level is (exit depth, speculation length, chunk length in waypoints, gate). Level 0 is
full quality; higher levels cost less: a longer fixed speculation window, a shorter chunk,
then, ordered by cost per token, the model's token-gated graph sets (graphs.json "gated":
full depth with FFN routers at a threshold; cost their measured step ratio) and its
shallower early exits (cost depth / n_layer). Both are lossy: their accuracy, from the card
or the gated declaration, is shown per level.
Where the card measured each level's lockstep success and chunk cost ("level_success",
written by `python -m examples.conveyor_sorting.card_eval MODEL --levels`), that orders
the ladder instead: a level that saves compute but sorts worse than a cheaper one is left
out, and a level dearer than full quality too (order_by_success).
A chunk never gets shorter than two waypoints: with one, the tracker reaches its only
setpoint before the next chunk lands and the arm stops and starts (in the conveyor demo
under CPU stress that level sorted 13 of 29 objects against 30 of 30 at full quality).
The active level is max(monitor's level, own level). The own level follows the slack
with hysteresis: it sheds compute (one level up, cheaper) as soon as a cycle's slack falls
below `shed_below` of the deadline, and restores it (one level down) after `patience`
consecutive cycles with slack above `restore_above`; the fractions are the ones the monitor
and the demo use (rtinfer.realtime.deadline).
Pure bookkeeping, no clock reads; not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtinfer.realtime.deadline import RESTORE_ABOVE, SHED_BELOW


@dataclass(frozen=True)
class BudgetLevel:
    depth: int
    spec_len: int  # max drafts per verify (0: no speculation)
    chunk: int  # waypoints per chunk
    accuracy: float | None = None  # from card.json, at this depth (or of this gate)
    gate: str | None = None  # a gated graph set's name (ModelDir.gated); None: dense graphs


def candidate_levels(model, k_verify: int, gates=None) -> list[BudgetLevel]:
    """The ladder by static cost, before any measured success reorders it: full, full + max
    window + half chunk (at least two waypoints), then, most expensive first, each exit (no
    speculation) and each gated set cheaper than dense (step_ratio < 1; full depth, max
    window, half chunk) with that chunk; a tie in cost puts the more accurate first.
    gates: the gated sets to offer (None: every one the model declares; pass the backend's
    `gates` when it cannot run them all)."""
    full, H = model.n_layer, model.tokenizer.horizon
    half, g = min(H, max(2, H // 2)), max(0, k_verify - 1)
    gated = getattr(model, "gated", {})
    names = list(gated) if gates is None else [n for n in gated if n in gates]
    cheaper = [
        (e / full, model.accuracy(e), BudgetLevel(e, 0, half, model.accuracy(e)))
        for e in model.config.get("exits", [])
    ]
    cheaper += [
        (gated[n].step_ratio, gated[n].accuracy, BudgetLevel(full, g, half, gated[n].accuracy, n))
        for n in names
        if gated[n].step_ratio < 1.0
    ]
    cheaper.sort(key=lambda c: (-c[0], -(c[1] if c[1] is not None else -1.0)))
    raw = [
        BudgetLevel(full, g, H, model.accuracy(full)),
        BudgetLevel(full, g, half, model.accuracy(full)),
    ] + [c[2] for c in cheaper]
    levels = []
    for lv in raw:
        if not levels or lv != levels[-1]:
            levels.append(lv)
    return levels


def level_key(level: BudgetLevel) -> tuple:
    """How a measured level is matched: depth, speculating or not, chunk, gate (the window
    follows the backend's verify width, so it is not part of the key)."""
    return level.depth, level.spec_len > 0, level.chunk, level.gate


def measured_levels(card: dict, k_verify: int) -> dict:
    """card.json "level_success" (written by `python -m examples.conveyor_sorting.card_eval
    MODEL --levels`): level_key -> (BudgetLevel with the measured success as its accuracy,
    chunk cost in CPU ms)."""
    out = {}
    for e in card.get("level_success", {}).get("levels", []):
        lv = BudgetLevel(
            int(e["depth"]),
            max(0, k_verify - 1) if e["spec_len"] else 0,
            int(e["chunk"]),
            float(e["success_rate"]),
            e.get("gate"),
        )
        out[level_key(lv)] = (lv, float(e["chunk_cpu_ms"]))
    return out


def order_by_success(levels: list[BudgetLevel], measured: dict) -> list[BudgetLevel]:
    """Level 0 (full quality) first, then every other measured level cheaper than it, most
    expensive first, dropping each one that a level as cheap or cheaper sorts strictly
    better than: so the ladder only trades success for compute saved, and a level that
    saves compute but sorts poorly comes after (or gives way to) a cheaper, useful one.
    levels: the candidates (level 0 first); measured: measured_levels(); levels it does not
    cover are left out (it may name more than the candidates: e.g. an exit at full chunk)."""
    top = measured.get(level_key(levels[0]))
    if top is None:
        return list(levels)
    rest = [m for k, m in measured.items() if k != level_key(levels[0]) and m[1] < top[1]]
    keep = [
        m
        for m in rest
        if not any(o is not m and o[1] <= m[1] and o[0].accuracy > m[0].accuracy for o in rest)
    ]
    keep.sort(key=lambda m: (-m[1], -m[0].accuracy))
    return [top[0]] + [m[0] for m in keep]


def default_levels(model, k_verify: int, gates=None) -> list[BudgetLevel]:
    """The model's budget levels, full quality first: candidate_levels(), reordered by
    order_by_success() where the card measured the lockstep success and chunk cost of
    every candidate (card "level_success"); else the candidates as they are. A measured
    gated level the backend cannot run (not in `gates`) is left out."""
    levels = candidate_levels(model, k_verify, gates)
    measured = measured_levels(getattr(model, "card", {}) or {}, k_verify)
    if gates is not None:
        measured = {k: m for k, m in measured.items() if k[3] is None or k[3] in gates}
    if not all(level_key(lv) in measured for lv in levels):
        return levels
    return order_by_success(levels, measured)


def prefill_depth(level: BudgetLevel, full: int, has_graph) -> int:
    """The depth a level prefills the observation segment at: its exit depth when it decodes
    there alone (no speculation: nothing will verify at full depth, so the deeper layers'
    KV is never read) and has_graph(depth) says a prefill graph exists there; else full.
    The single-row and the batched runner both ask here."""
    if level.spec_len == 0 and level.depth < full and has_graph(level.depth):
        return level.depth
    return full


class Budget:
    def __init__(
        self,
        levels: list[BudgetLevel],
        deadline_ns: int,
        *,
        shed_below: float = SHED_BELOW,
        restore_above: float = RESTORE_ABOVE,
        patience: int = 10,
        auto: bool = True,
    ):
        if not levels:
            raise ValueError("need at least one budget level")
        self.levels, self.deadline_ns, self.auto = list(levels), int(deadline_ns), auto
        self.shed_below_ns = int(shed_below * deadline_ns)
        self.restore_above_ns = int(restore_above * deadline_ns)
        self.patience = patience
        self.monitor_level = 0
        self.own_level = 0
        self._calm = 0
        self.switches = 0
        self._last = 0

    def fresh(self) -> Budget:
        """A new Budget like this one (levels, deadline, thresholds, mode) for another robot:
        at level 0, or at this one's own level when that is fixed (auto off)."""
        b = Budget(self.levels, self.deadline_ns, patience=self.patience, auto=self.auto)
        b.shed_below_ns, b.restore_above_ns = self.shed_below_ns, self.restore_above_ns
        if not self.auto:
            b.own_level = b._last = self.own_level
        b.monitor_level = self.monitor_level
        return b

    @property
    def index(self) -> int:
        return min(max(self.monitor_level, self.own_level), len(self.levels) - 1)

    @property
    def level(self) -> BudgetLevel:
        return self.levels[self.index]

    def fix(self, level: int) -> None:
        """Hold the own level at `level` (-1: the cheapest), as a fixed budget (auto off)
        does. ValueError: no such level."""
        n = len(self.levels)
        if not -n <= level < n:
            raise ValueError(
                f"this model has {n} budget levels (0 .. {n - 1}, or -1 for the cheapest)"
            )
        self.own_level = self._last = level % n

    def set_monitor_level(self, level: int) -> None:
        """A `budget` message from the monitor: a floor on the level (0 lifts it)."""
        self.monitor_level = max(0, int(level))
        self._count()

    def update(self, slack_ns: int) -> int:
        """One finished cycle's slack (deadline - (last publish - capture)); returns the
        active level index."""
        if not self.auto:
            return self.index
        top = len(self.levels) - 1
        if slack_ns < self.shed_below_ns:
            self.own_level, self._calm = min(self.own_level + 1, top), 0
        elif slack_ns > self.restore_above_ns:
            self._calm += 1
            if self._calm >= self.patience and self.own_level > 0:
                self.own_level, self._calm = self.own_level - 1, 0
        else:
            self._calm = 0
        self._count()
        return self.index

    def _count(self) -> None:
        if self.index != self._last:
            self.switches += 1
            self._last = self.index
