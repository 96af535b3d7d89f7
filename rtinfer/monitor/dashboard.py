"""Live terminal dashboard: the latest `health` of every node, as rich tables.

Listens to the endpoints of a running launch (robot, policy, monitor) and keeps only the
newest health body per node; rendering reads those. The monitor's figures are shown as its
health states them, by the definitions of rtinfer.monitor.stages; once the monitor has
stopped, its last health carries the same counts as its report (`final`). Not on any
real-time path.

One robot: one table of the run's figures. A fleet (controllers named controller-K): that
table with the fleet's sums, and below it a row per robot (`robot_rows`), its robot being
the src its controller's health comes from: the instruction its observations carry, its
controller's state (or "refused", see `refused`), its cell's objects, the monitor's figures
for that controller (e2e, misses / cycles: `e2e_p50_ms.NODE`, `cycles.NODE`, ...; without
them the controller's own e2e max), its watchdog holds and its budget level as its policy
node reports it.
"""

from __future__ import annotations

from collections.abc import Callable

from rich import box
from rich.console import Group
from rich.table import Table

from rtinfer.transport.bus import Subscriber
from rtinfer.transport.wire import now_ns


class Dashboard:
    def __init__(
        self,
        endpoints: list[str],
        title: str = "rtinfer demo",
        *,
        clock: Callable[[], int] = now_ns,
    ):
        """clock: monotonic ns, read for the run's age in the title."""
        self.sub = Subscriber(endpoints, ["health", "obs"], latest_only=False)
        self.title, self.latest, self.clock = title, {}, clock
        self.t0 = clock()
        self.src: dict[str, str] = {}  # node -> the src of its health (a controller's: its robot)
        self.instruction: dict[str, str] = {}  # robot -> the instruction its observations carry
        self._ticks = (0.0, 0)  # (publish time s, controller ticks) of the rate's last sample
        self._ctl = (0.0, 0)  # the same, of the newest controller health
        self.loop_hz = 0.0

    def poll(self, timeout_ms: int = 100) -> None:
        env = self.sub.recv(timeout_ms)
        while env is not None:
            if env.topic == "obs":
                self._note_instruction(env.src, env.body["values"].get("instruction"))
                env = self.sub.recv(0)
                continue
            self.latest[env.body["node"]], self.src[env.body["node"]] = env.body, env.src
            if env.body["node"] in ("controller", "controller-0"):  # sender-timed: no jitter
                sent = env.stamps.get("publish", env.stamps.get("recv", 0))
                self._ctl = (sent / 1e9, env.body["counters"].get("ticks", 0))
            env = self.sub.recv(0)

    def _note_instruction(self, robot: str, instruction) -> None:
        """A short integer `instruction` array (the conveyor's class -> bin order) as text."""
        if instruction is not None and instruction.dtype.kind in "iu" and instruction.size <= 16:
            self.instruction[robot] = ",".join(str(int(x)) for x in instruction.ravel())

    def _get(self, node: str, kind: str, key: str, default=0):
        return self.latest.get(node, {}).get(kind, {}).get(key, default)

    def _sum(self, node: str, key: str) -> int:
        """A counter of `node`, or summed over a fleet's `node-0`, `node-1`, ..."""
        return sum(
            b.get("counters", {}).get(key, 0)
            for n, b in self.latest.items()
            if n == node or n.startswith(node + "-")
        )

    @property
    def final(self) -> bool:
        """The monitor's last health has come: its counts are those of its report."""
        return self.latest.get("monitor", {}).get("state") == "stopped"

    def _budget(self) -> str:
        mon = lambda k, d=0: self._get("monitor", "counters", k, d)  # noqa: E731
        requested = f"{mon('budget_requests')} requested"
        if mon("budget_changes", None) is None:  # no policy node reports what it applied
            return f"level {mon('level')} requested ({requested}; none reported applied)"
        return (
            f"level {mon('applied_level')}  ({mon('budget_changes')} changes applied, {requested})"
        )

    def _latency(self, stage: str, quantiles: tuple[str, ...], digits: int) -> str:
        g = lambda q: self._get("monitor", "gauges", f"{stage}_{q}_ms")  # noqa: E731
        text = " / ".join(f"{g(q):.{digits}f}" for q in quantiles) + " ms"
        clamped = self._get("monitor", "counters", f"{stage}_clamped")
        return text + (f"  ({clamped} clamped)" if clamped else "")

    @property
    def fleet(self) -> bool:
        """A fleet's controllers (controller-0, controller-1, ...) have been heard."""
        return any(n.startswith("controller-") for n in self.latest)

    def render(self):
        """The run's table; in a fleet, with the table of robots below it."""
        if not self.fleet:
            return self._summary()
        return Group(self._summary(), robots_table(self.robot_rows()))

    def _summary(self) -> Table:
        # from the controller's own health messages (their publish stamps), so the rate holds
        # its last value once the loop has stopped instead of decaying with the render clock
        (t, ticks), (t_prev, n_prev) = self._ctl, self._ticks
        if t > t_prev + 0.5 and ticks >= n_prev:
            self.loop_hz = (ticks - n_prev) / (t - t_prev) if n_prev else 0.0
            self._ticks = (t, ticks)
        cell = lambda k: self._sum("cell", k)  # noqa: E731
        mon = lambda kind, k: self._get("monitor", kind, k)  # noqa: E731
        pol = lambda k: self._get("policy", "counters", k)  # noqa: E731
        drafted = pol("chunk.drafted") + pol("self.drafted")
        acc = (pol("chunk.accepted") + pol("self.accepted")) / drafted if drafted else None
        final = (
            "final, as the monitor's report"
            if self.final
            else f"{(self.clock() - self.t0) / 1e9:.0f} s"
        )
        t = Table(title=f"{self.title}  ({final})", show_header=False)
        t.add_column("what", style="bold")
        t.add_column("value", justify="right")
        rows = [
            (
                "objects sorted / wrong / missed / dropped",
                f"{cell('correct')} / {cell('wrong')} / {cell('missed')} / {cell('dropped')}",
            ),
            (
                "control loop rate",
                f"{self.loop_hz:.0f} Hz  (late ticks {self._sum('controller', 'late_ticks')})",
            ),
            (
                "e2e p50 / p99 / max (applied chunks)",
                self._latency("e2e", ("p50", "p99", "max"), 1),
            ),
            ("TTFT p50 / p99", self._latency("ttft", ("p50", "p99"), 2)),
            (
                "deadline misses / cycles",
                f"{mon('counters', 'misses')} / {mon('counters', 'cycles')}  "
                f"({mon('counters', 'late_cycles')} late waypoints: never applied, so in no e2e)",
            ),
            ("budget", self._budget()),
            (
                "holds (watchdog / ordered)",
                f"{self._sum('controller', 'holds')} / {mon('counters', 'holds')}",
            ),
            ("speculative acceptance", "-" if acc is None else f"{acc:.2f}"),
        ]
        errors = self.errors()
        if errors:
            rows.append(("[bold red]errors[/]", "[red]" + "; ".join(errors) + "[/]"))
        for r in rows:
            t.add_row(*r)
        return t

    def _inference_counters(self) -> list[dict]:
        """The counters of every inference node heard (they count robots_refused)."""
        return [c for b in self.latest.values() if "robots_refused" in (c := b.get("counters", {}))]

    def refused(self) -> set[str]:
        """The robots an inference node refused admission and has not admitted since: those
        its health names (`robot.NAME.refused`); failing names, the robots never served
        (no chunk accepted, no cycles in its health) when they are no more than it counts
        refused (robots_refused - robots_admitted_late)."""
        named, served, pending = set(), set(), 0
        for c in self._inference_counters():
            pending += c["robots_refused"] - c.get("robots_admitted_late", 0)
            for key, value in c.items():
                robot, _, what = key.removeprefix("robot.").rpartition(".")
                if key.startswith("robot.") and value:
                    (named if what == "refused" else served).add(robot)
        if len(named) >= pending:
            return named
        never = (
            {
                self.src[n]
                for n in self._controllers()
                if not self.latest[n]["counters"].get("chunks_accepted")
            }
            - served
            - named
        )
        return named | never if len(never) <= pending - len(named) else named

    def _controllers(self) -> list[str]:
        """A fleet's controller nodes, in robot order (controller-2 before controller-10)."""
        names = [n for n in self.latest if n.startswith("controller-")]
        return sorted(names, key=lambda n: (len(n), n))

    def robot_rows(self) -> list[dict]:
        """One dict per robot of a fleet (see the module doc); a figure nobody reported is
        None."""
        refused, mon = self.refused(), self.latest.get("monitor", {})
        mc, mg = mon.get("counters", {}), mon.get("gauges", {})
        policy = self._inference_counters()
        rows = []
        for node in self._controllers():
            body, robot = self.latest[node], self.src[node]
            cell = self.latest.get(robot, {}).get("counters", {})
            e2e = tuple(mg.get(f"e2e_{q}_ms.{node}") for q in ("p50", "p99", "max"))
            if e2e[2] is None and body.get("counters", {}).get("chunks_accepted"):
                e2e = (None, None, body.get("gauges", {}).get("e2e_max_ms"))  # its own
            level = [
                c[f"robot.{robot}.budget_level"]
                for c in policy
                if f"robot.{robot}.budget_level" in c
            ]
            rows.append(
                {
                    "robot": robot,
                    "controller": node,
                    "instruction": self.instruction.get(robot),
                    "state": "refused" if robot in refused else body.get("state"),
                    "objects": tuple(cell[k] for k in ("correct", "wrong", "missed"))
                    if "spawned" in cell
                    else None,
                    "e2e_ms": e2e,
                    "misses": mc.get(f"misses.{node}"),
                    "cycles": mc.get(f"cycles.{node}"),
                    "holds": body.get("counters", {}).get("holds"),
                    "budget_level": level[0] if level else None,
                }
            )
        return rows

    def errors(self) -> list[str]:
        """Input dropped that means a policy is not being followed, and a robot that does
        not answer: one phrase each."""
        ctl = lambda k: self._sum("controller", k)  # noqa: E731
        out = []
        if ctl("rejected_hash"):
            out.append(f"{ctl('rejected_hash')} chunks of another spec (hash) rejected")
        if ctl("rejected_dest") and not self.fleet:  # in a fleet: the other robots' chunks
            out.append(f"{ctl('rejected_dest')} chunks for another robot rejected")
        if ctl("rejected_bad"):
            out.append(f"{ctl('rejected_bad')} malformed waypoints rejected")
        faults = [
            f"{ctl(k)} failed {k.split('_')[0]}s" for k in ("read_faults", "write_faults") if ctl(k)
        ]
        if faults:
            out.append("robot hardware: " + ", ".join(faults) + " (the robot held)")
        if self._get("policy", "counters", "obs_bad"):
            out.append(
                f"{self._get('policy', 'counters', 'obs_bad')} observations did not "
                f"fit the policy's model"
            )
        return out

    def close(self) -> None:
        self.sub.close()


ROBOT_COLUMNS = (
    "robot",
    "instruction",
    "state",
    "sorted/\nwrong/\nmissed",
    "e2e ms\np50/p99/max",
    "misses/\ncycles",
    "holds",
    "budget\nlevel",
)
STATE_STYLE = {
    "run": "green",
    "hold": "yellow",
    "safe_hold": "yellow",
    "fault": "bold red",
    "refused": "bold red",
}


def robots_table(rows: list[dict]) -> Table:
    """Dashboard.robot_rows as a table, one line per robot ("-": not reported); narrow
    enough for 90 columns (headers wrap; on fewer, figures fold rather than lose digits)."""

    def text(v, fmt="{}"):
        return "-" if v is None else fmt.format(v)

    t = Table(title="robots", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ROBOT_COLUMNS:
        t.add_column(
            name, justify="left" if name in ("robot", "state") else "right", overflow="fold"
        )
    for r in rows:
        state, misses = r["state"] or "-", r["misses"]
        t.add_row(
            r["robot"],
            text(r["instruction"]),
            f"[{STATE_STYLE[state]}]{state}[/]" if state in STATE_STYLE else state,
            "/".join(map(str, r["objects"])) if r["objects"] else "-",
            "/".join(text(v, "{:.1f}") for v in r["e2e_ms"]),
            ("[red]" if misses else "")
            + f"{text(misses)}/{text(r['cycles'])}"
            + ("[/]" if misses else ""),
            text(r["holds"]),
            text(r["budget_level"]),
        )
    return t
