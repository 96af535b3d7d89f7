"""The launch file as data: node, endpoint and restart specs, and ``${...}`` substitution.

Built and validated by `rtinfer.launch.file.load` (the schema is documented there); these
are frozen dataclasses, safe to share between threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rtinfer.launch.runs import ipc_path
from rtinfer.launch.yaml_lines import LaunchError
from rtinfer.realtime.deadline import DEADLINE_MS

REF = re.compile(r"\$\{([^}]*)\}")  # a ${name} reference in a node argument


@dataclass(frozen=True)
class RestartPolicy:
    """`on-failure`: restart after a non-zero exit or a signal, waiting backoff_s * 2**n
    (capped at backoff_max_s; n = restarts in the last window_s), at most max_restarts
    times per window. `never`: a failure is final."""

    policy: str = "never"
    max_restarts: int = 5
    window_s: float = 60.0
    backoff_s: float = 0.5
    backoff_max_s: float = 10.0

    def delay_s(self, recent_restarts: int) -> float:
        return min(self.backoff_max_s, self.backoff_s * 2.0**recent_restarts)


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str  # "ipc": ipc://<run_dir>/<name> (rtinfer.launch.runs.ipc_path)
    curve: bool = False
    server_key: str | None = None
    allow: str | None = None

    def address(self, run_dir: str | Path) -> str:
        return f"ipc://{ipc_path(run_dir, self.name)}" if self.url == "ipc" else self.url


@dataclass(frozen=True)
class NodeSpec:
    name: str
    entry: str  # "module:function"
    args: tuple[str, ...] = ()  # with ${...} references, resolved by LaunchSpec.argv
    host: str | None = None
    cpus: tuple[int, ...] | None = None
    priority: int | None = None
    required: bool = True
    restart: RestartPolicy = RestartPolicy()
    after: tuple[str, ...] = ()
    stop_grace_s: float = 5.0
    curve_secret: str | None = None
    robot: int | None = None  # robot k's copy of a per_robot node (robots: N), else None
    ready_s: float = 0.0  # the next node starts once this one said its first line, or
    #                              after this long (the monitor's, the recorder's)
    line: int = 0


@dataclass(frozen=True)
class LaunchSpec:
    path: str
    name: str
    nodes: tuple[NodeSpec, ...]  # in start order
    endpoints: dict[str, Endpoint]
    deadline_ms: float = DEADLINE_MS
    seconds: float | None = None
    run_dir: str | None = None
    rates: dict = field(default_factory=dict)
    vars: dict = field(default_factory=dict)
    hosts: dict = field(default_factory=dict)
    monitor: dict = field(default_factory=dict)
    realtime: bool = True  # False: the nodes' cpus and priority are not applied

    def nodes_for(self, host: str | None) -> list[NodeSpec]:
        """The nodes this launcher runs: all of them, or `host`'s plus the host-less ones."""
        named = sorted({n.host for n in self.nodes if n.host})
        if host is None:
            if len(named) > 1:
                raise LaunchError(
                    f"{self.path}: nodes run on hosts {', '.join(named)}; "
                    "pass --host NAME to run one host's nodes"
                )
            return list(self.nodes)
        if host not in named and host not in self.hosts:
            raise LaunchError(f"{self.path}: no host {host!r}; hosts: {', '.join(named) or 'none'}")
        return [n for n in self.nodes if n.host in (None, host)]

    def values(self, run_dir: str | Path, host: str | None = None) -> dict[str, str]:
        """The substitution table for one run (node-independent part)."""
        run_dir = str(Path(run_dir).resolve())
        v = {
            "run_dir": run_dir,
            "deadline_ms": as_text(self.deadline_ms),
            "name": self.name,
            "host": host or "",
            "monitor_config": f"{run_dir}/monitor.json",
            "curve_map": f"{run_dir}/curve.json",
            "seconds": "" if self.seconds is None else as_text(self.seconds),
        }
        v.update({f"vars.{k}": as_text(x) for k, x in self.vars.items()})
        v.update({f"rates.{k}": as_text(x) for k, x in self.rates.items()})
        for e in self.endpoints.values():
            v[f"endpoints.{e.name}"] = e.address(run_dir)
            v[f"endpoints.{e.name}.server_key"] = e.server_key or ""
            v[f"endpoints.{e.name}.allow"] = e.allow or ""
        return v

    def endpoints_used(self, nodes) -> list[str]:
        """Names of the endpoints that `nodes`' args refer to (what a launcher of them holds)."""
        refs = {m.group(1).strip() for n in nodes for a in n.args for m in REF.finditer(a)}
        return [e for e in self.endpoints if any(r == f"endpoints.{e}" for r in refs)]

    def takes_seconds(self, nodes) -> bool:
        """Whether a node of `nodes` takes ${seconds} (then it ends the run itself)."""
        return any(
            m.group(1).strip() == "seconds" for n in nodes for a in n.args for m in REF.finditer(a)
        )

    def curve_map(self, run_dir: str | Path) -> dict:
        """{address: {"server_key", "allow"}} of the CURVE endpoints (written to curve.json)."""
        return {
            e.address(run_dir): {"server_key": e.server_key, "allow": e.allow}
            for e in self.endpoints.values()
            if e.curve
        }

    def argv(self, node: NodeSpec, values: dict[str, str]) -> list[str]:
        """`node.args` with every ``${...}`` replaced (references were validated on load)."""
        table = dict(
            values, **{"node.name": node.name, "node.curve_secret": node.curve_secret or ""}
        )
        return [REF.sub(lambda m: table[m.group(1).strip()], a) for a in node.args]


def as_text(x) -> str:
    """A YAML scalar as an argv string (true/false lower-case, as YAML writes them)."""
    return str(x).lower() if isinstance(x, bool) else str(x)
