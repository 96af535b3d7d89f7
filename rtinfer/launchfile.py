"""YAML launch files: schema, validation with line numbers, and ``${...}`` substitution.

A launch file is checked completely before any process starts; every problem becomes one
line of a single `LaunchError` (``FILE:LINE: where: what is wrong; what to do``).

Schema (unknown keys are errors; see docs/launch.md for a worked example)::

    version: 1                    # optional, must be 1
    name: conveyor_sorting        # optional; default: the file's stem
    description: text             # optional
    run_dir: runs/demo            # optional; default runs/<name>-<YYYYmmdd-HHMMSS>; --run-dir wins
    deadline_ms: 100              # number, default 100       -> ${deadline_ms}
    seconds: 60                   # number, optional          -> ${seconds}
    rates: {policy_hz: 20}        # name -> number            -> ${rates.policy_hz}
    vars: {model: models/zoo/x}   # name -> scalar            -> ${vars.model}
    hosts: {robot: {address: 10.10.0.2}}   # optional; node `host:` must name one
    endpoints:                    # name -> "ipc" | URL | mapping
      obs: ipc                    # ipc://<run_dir>/obs (the launcher creates run_dir)
      actions:
        url: tcp://10.10.0.1:5556 # tcp: CURVE required unless `curve: off`
        curve: required           # required | off
        server_key: keys/gpu.key  # public key of the node that binds it
        allow: keys/clients       # directory of allowed client public keys
    nodes:                        # list; start order = file order, adjusted by `after:`
      - name: policy              # required, unique
        entry: rtinfer.node:main  # required: module:function, called with the argv list
        args: [--obs, "${endpoints.obs}"]
        host: gpu                 # optional; `--host gpu` runs only gpu's (and host-less) nodes
        cpus: [3, 4]              # optional CPU affinity, applied in the child before entry
        priority: 10              # optional SCHED_FIFO priority 1..99, null = normal
        required: true            # default true: dying for good stops the launch, exit 1
        restart: never            # never | on-failure | {policy, max_restarts, window_s,
                                  #                       backoff_s, backoff_max_s}
        after: [sim]              # optional: start after these nodes
        stop_grace_s: 5           # SIGTERM -> wait this long -> SIGKILL (whole process group)
        curve_secret: keys/gpu.key_secret   # optional -> ${node.curve_secret}
    monitor: {...}                # free-form data, written to ${monitor_config} (JSON)

References: ``${run_dir} ${deadline_ms} ${seconds} ${name} ${host} ${monitor_config}
${vars.K} ${rates.K} ${endpoints.E} ${endpoints.E.server_key} ${endpoints.E.allow}
${node.name} ${node.curve_secret}``. An unknown reference is a validation error.

Entry points are checked without running module code: `importlib.util.find_spec` finds
the module (this imports its parent packages, which in this repo are light), and the
function is looked up statically in the module's source with `ast` (top-level def, class,
assignment or import). Modules without Python source skip the function check; the child
then reports a missing function when it starts (exit 127).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .launchyaml import LaunchError, Report, compose_file, check_entry, check_fields

TOP_KEYS = {"version": int, "name": str, "description": str, "run_dir": str,
            "deadline_ms": float, "seconds": float, "rates": dict, "vars": dict,
            "hosts": dict, "endpoints": dict, "nodes": list, "monitor": dict}
NODE_KEYS = {"name": str, "entry": str, "args": list, "host": str, "cpus": list,
             "priority": (int, type(None)), "required": bool, "restart": (str, dict),
             "after": list, "stop_grace_s": float, "curve_secret": str}
RESTART_KEYS = {"policy": str, "max_restarts": int, "window_s": float, "backoff_s": float,
                "backoff_max_s": float}
ENDPOINT_KEYS = {"url": str, "curve": str, "server_key": str, "allow": str}
HOST_KEYS = {"address": str, "description": str}
REF = re.compile(r"\$\{([^}]*)\}")
TCP = re.compile(r"^tcp://([^:/]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$")
SCALARS = ("run_dir", "deadline_ms", "seconds", "name", "host", "monitor_config")


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
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** recent_restarts)


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str                     # "ipc" means ipc://<run_dir>/<name>, resolved per run
    curve: bool = False
    server_key: str | None = None
    allow: str | None = None

    def address(self, run_dir: str | Path) -> str:
        return f"ipc://{Path(run_dir).resolve()}/{self.name}" if self.url == "ipc" else self.url


@dataclass(frozen=True)
class NodeSpec:
    name: str
    entry: str                   # "module:function"
    args: tuple[str, ...] = ()   # with ${...} references, resolved by LaunchSpec.argv
    host: str | None = None
    cpus: tuple[int, ...] | None = None
    priority: int | None = None
    required: bool = True
    restart: RestartPolicy = RestartPolicy()
    after: tuple[str, ...] = ()
    stop_grace_s: float = 5.0
    curve_secret: str | None = None
    line: int = 0


@dataclass(frozen=True)
class LaunchSpec:
    path: str
    name: str
    nodes: tuple[NodeSpec, ...]              # in start order
    endpoints: dict[str, Endpoint]
    deadline_ms: float = 100.0
    seconds: float | None = None
    run_dir: str | None = None
    rates: dict = field(default_factory=dict)
    vars: dict = field(default_factory=dict)
    hosts: dict = field(default_factory=dict)
    monitor: dict = field(default_factory=dict)

    def nodes_for(self, host: str | None) -> list[NodeSpec]:
        """The nodes this launcher runs: all of them, or `host`'s plus the host-less ones."""
        named = sorted({n.host for n in self.nodes if n.host})
        if host is None:
            if len(named) > 1:
                raise LaunchError(f"{self.path}: nodes run on hosts {', '.join(named)}; "
                                  "pass --host NAME to run one host's nodes")
            return list(self.nodes)
        if host not in named and host not in self.hosts:
            raise LaunchError(f"{self.path}: no host {host!r}; hosts: {', '.join(named) or 'none'}")
        return [n for n in self.nodes if n.host in (None, host)]

    def values(self, run_dir: str | Path, host: str | None = None) -> dict[str, str]:
        """The substitution table for one run (node-independent part)."""
        run_dir = str(Path(run_dir).resolve())
        v = {"run_dir": run_dir, "deadline_ms": _text(self.deadline_ms), "name": self.name,
             "host": host or "", "monitor_config": f"{run_dir}/monitor.json",
             "seconds": "" if self.seconds is None else _text(self.seconds)}
        v.update({f"vars.{k}": _text(x) for k, x in self.vars.items()})
        v.update({f"rates.{k}": _text(x) for k, x in self.rates.items()})
        for e in self.endpoints.values():
            v[f"endpoints.{e.name}"] = e.address(run_dir)
            v[f"endpoints.{e.name}.server_key"] = e.server_key or ""
            v[f"endpoints.{e.name}.allow"] = e.allow or ""
        return v

    def argv(self, node: NodeSpec, values: dict[str, str]) -> list[str]:
        """`node.args` with every ``${...}`` replaced (references were validated on load)."""
        table = dict(values, **{"node.name": node.name, "node.curve_secret": node.curve_secret or ""})
        return [REF.sub(lambda m: table[m.group(1).strip()], a) for a in node.args]


def _text(x) -> str:
    return str(x).lower() if isinstance(x, bool) else str(x)


def load(path: str | Path, overrides: dict[str, str] | None = None, *,
         check_entries: bool = True) -> LaunchSpec:
    """Read and validate a launch file; raises `LaunchError` listing every problem.

    overrides: {"deadline_ms": "50", "vars.model": "...", "rates.policy_hz": "10", ...},
    each value parsed as YAML, applied before validation (reported as line 0).
    """
    data, marks = compose_file(path, overrides)
    r = Report(str(path), marks)
    check_fields(r, data, (), TOP_KEYS, required=("endpoints", "nodes"))
    if data.get("version", 1) != 1:
        r.err(("version",), "unsupported version; this launcher reads version: 1")
    for sect in ("rates", "vars"):
        for k, x in (data.get(sect) or {}).items():
            if not isinstance(x, (int, float) if sect == "rates" else (int, float, str, bool)) \
                    or isinstance(x, bool) and sect == "rates":
                r.err((sect, k), f"expected a {'number' if sect == 'rates' else 'scalar'}")
    hosts = data.get("hosts") or {}
    for h, body in hosts.items():
        check_fields(r, body, ("hosts", h), HOST_KEYS)
    from .launchspec import build_endpoints, build_nodes, check_references
    endpoints = build_endpoints(r, data.get("endpoints") or {})
    nodes = build_nodes(r, data.get("nodes") or [], hosts)
    if check_entries:
        for i, n in enumerate(nodes):
            check_entry(r, ("nodes", i, "entry"), n.entry)
    check_references(r, data, nodes, endpoints)
    r.raise_if_any()
    return LaunchSpec(path=str(path), name=data.get("name") or Path(path).stem,
                      nodes=tuple(nodes), endpoints=endpoints,
                      deadline_ms=data.get("deadline_ms", 100.0), seconds=data.get("seconds"),
                      run_dir=data.get("run_dir"), rates=dict(data.get("rates") or {}),
                      vars=dict(data.get("vars") or {}), hosts=dict(hosts),
                      monitor=dict(data.get("monitor") or {}))
