"""YAML launch files: schema, validation with line numbers, and ``${...}`` substitution.

A launch file is checked completely before any process starts; every problem becomes one
line of a single `LaunchError` (``FILE:LINE: where: what is wrong; what to do``).

Schema (unknown keys are errors; see docs/launch.md for a worked example)::

    version: 1                    # optional, must be 1
    name: conveyor_sorting        # optional; default: the file's stem
    description: text             # optional
    run_dir: runs/demo            # optional; default a new runs/<name>-<YYYYmmdd-HHMMSS>[-N];
                                  # --run-dir wins
    deadline_ms: 100              # number, default 100       -> ${deadline_ms}
    realtime: true                # default true; false: no node's cpus/priority is applied
    robots: 3                     # optional: each `per_robot: true` endpoint and node is
                                  # copied per robot first (per_robot.py) -> ${robot}
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
        entry: rtinfer.inference.node:main  # required: module:function, called with the argv list
        args: [--obs, "${endpoints.obs}"]
        host: gpu                 # optional; `--host gpu` runs only gpu's (and host-less) nodes
        cpus: [3, 4]              # optional CPU affinity, applied in the child before entry
        priority: 10              # optional SCHED_FIFO priority 1..99, null = normal
        required: true            # default true: dying for good stops the launch, exit 1
        restart: never            # never | on-failure | {policy, max_restarts, window_s,
                                  #                       backoff_s, backoff_max_s}
        after: [sim]              # optional: start after these nodes
        stop_grace_s: 5           # SIGTERM -> wait this long -> SIGKILL (whole process group)
        ready_s: 20               # optional: the next nodes start once this one said its first
                                  # line (it is listening), or after this long; default 0
        curve_secret: keys/gpu.key_secret   # optional -> ${node.curve_secret}
    monitor: {...}                # MonitorConfig's fields (checked from its source)
                                  #                       -> ${monitor_config}

Files the launcher writes in run_dir before starting nodes: monitor.json (the monitor:
section) and curve.json ({address: {server_key, allow}} for each CURVE endpoint; a node
combines it with its own ${node.curve_secret} to build rtinfer.transport.curve.CurveConfig).

References: ``${run_dir} ${deadline_ms} ${seconds} ${name} ${host} ${monitor_config}
${curve_map} ${vars.K} ${rates.K} ${endpoints.E} ${endpoints.E.server_key} ${endpoints.E.allow}
${node.name} ${node.curve_secret}``. An unknown reference is a validation error.

Entry points are checked without running module code: `importlib.util.find_spec` finds
the module (this imports its parent packages, which in this repo are light), and the
function is looked up statically in the module's source with `ast` (top-level def, class,
assignment or import). Modules without Python source skip the function check; the child
then reports a missing function when it starts (exit 127).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from rtinfer.launch.per_robot import expand_robots
from rtinfer.launch.runs import SUN_PATH_MAX, ipc_path
from rtinfer.launch.spec import REF, Endpoint, LaunchSpec, NodeSpec, RestartPolicy, as_text
from rtinfer.launch.yaml_lines import (
    TYPE_NAMES,
    Report,
    annotation_types,
    check_entry,
    check_fields,
    compose_file,
    dataclass_fields,
    is_type,
    section,
)
from rtinfer.realtime.deadline import DEADLINE_MS

TOP_KEYS = {
    "version": int,
    "name": str,
    "description": str,
    "run_dir": str,
    "deadline_ms": float,
    "seconds": float,
    "robots": int,
    "realtime": bool,
    "rates": dict,
    "vars": dict,
    "hosts": dict,
    "endpoints": dict,
    "nodes": list,
    "monitor": dict,
}
NODE_KEYS = {
    "name": str,
    "entry": str,
    "args": list,
    "host": str,
    "cpus": list,
    "priority": (int, type(None)),
    "required": bool,
    "restart": (str, dict),
    "after": list,
    "stop_grace_s": float,
    "curve_secret": str,
    "per_robot": bool,
    "ready_s": float,
}
RESTART_KEYS = {
    "policy": str,
    "max_restarts": int,
    "window_s": float,
    "backoff_s": float,
    "backoff_max_s": float,
}
# YAML 1.1 reads a bare `off` as false: accept the bool and normalise it below.
ENDPOINT_KEYS = {
    "url": str,
    "curve": (str, bool),
    "server_key": str,
    "allow": str,
    "per_robot": bool,
}
HOST_KEYS = {"address": str, "description": str}
TCP = re.compile(r"^tcp://([^:/]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$")
SCALARS = ("run_dir", "deadline_ms", "seconds", "name", "host", "monitor_config", "curve_map")
# The `monitor:` section is this dataclass's fields, read from its source (not imported:
# rtinfer.monitor sits beside rtinfer.launch, and no node code runs in the launcher).
MONITOR_CONFIG = "rtinfer.monitor.policy:MonitorConfig"


def load(
    path: str | Path, overrides: dict[str, str] | None = None, *, check_entries: bool = True
) -> LaunchSpec:
    """Read and validate a launch file; raises `LaunchError` listing every problem.

    overrides: {"deadline_ms": "50", "vars.model": "...", "rates.policy_hz": "10", ...},
    each value parsed as YAML, applied before validation (reported as line 0).
    """
    data, r = compose_file(path, overrides)
    check_fields(r, data, (), TOP_KEYS, required=("endpoints", "nodes"))
    robot_of = expand_robots(r, data)
    if data.get("version", 1) != 1:
        r.err(("version",), "unsupported version; this launcher reads version: 1")
    for key, what in (
        ("deadline_ms", "the end-to-end deadline in ms"),
        ("seconds", "how long the run lasts"),
    ):
        if is_type(data.get(key), float) and data[key] <= 0:
            r.err((key,), f"{key} must be > 0 ({what}), got {data[key]!r}")
    rates, vars_, hosts = (
        section(data, "rates", dict),
        section(data, "vars", dict),
        section(data, "hosts", dict),
    )
    for sect, values, t in (("rates", rates, float), ("vars", vars_, (int, float, str, bool))):
        for k, x in values.items():
            if not is_type(x, t):
                r.err((sect, k), f"{sect}.{k} must be {'a number' if t is float else 'a scalar'}")
            elif sect == "rates" and x <= 0:
                r.err((sect, k), f"rates.{k} must be > 0 (a rate in Hz), got {x!r}")
    _check_monitor(r, section(data, "monitor", dict))
    for h, body in hosts.items():
        check_fields(r, body, ("hosts", h), HOST_KEYS)
    endpoints = _endpoints(r, section(data, "endpoints", dict))
    nodes = _order(r, _nodes(r, section(data, "nodes", list), hosts, robot_of))
    if check_entries:
        for i, n in enumerate(nodes):
            check_entry(r, ("nodes", i, "entry"), n.entry)
    _check_references(r, nodes, endpoints, data)
    r.raise_if_any()
    return LaunchSpec(
        path=str(path),
        name=data.get("name") or Path(path).stem,
        nodes=tuple(nodes),
        endpoints=endpoints,
        deadline_ms=data.get("deadline_ms", DEADLINE_MS),
        seconds=data.get("seconds"),
        run_dir=data.get("run_dir"),
        rates=rates,
        vars=vars_,
        hosts=hosts,
        monitor=dict(data.get("monitor") or {}),
        realtime=data.get("realtime", True) is not False,
    )


def _check_monitor(r: Report, monitor: dict) -> None:
    """Unknown keys (with a "did you mean") and simple types of the `monitor:` section."""
    fields = dataclass_fields(MONITOR_CONFIG)
    if fields is None:
        return  # the monitor's source is not here (a robot-only install): the node checks
    for key, value in monitor.items():
        if key not in fields:
            near = difflib.get_close_matches(key, fields, n=1)
            r.err(
                ("monitor", key),
                f"unknown monitor key {key!r}; "
                + (
                    f"did you mean {near[0]!r}?"
                    if near
                    else f"the keys are the fields of {MONITOR_CONFIG}: {', '.join(fields)}"
                ),
            )
            continue
        types = annotation_types(fields[key])
        if types is not None and not is_type(value, types):
            want = " or ".join(TYPE_NAMES[t] for t in dict.fromkeys(types))
            r.err(
                ("monitor", key),
                f"monitor.{key} must be {want} ({MONITOR_CONFIG}."
                f"{key}: {fields[key]}), got {value!r}",
            )


def _endpoints(r: Report, data: dict) -> dict[str, Endpoint]:
    out: dict[str, Endpoint] = {}
    seen: dict[str, str] = {}
    for name, body in data.items():
        path = ("endpoints", name)
        body = {"url": body} if isinstance(body, str) else body
        if not check_fields(r, body, path, ENDPOINT_KEYS, required=("url",)) or not isinstance(
            body.get("url"), str
        ):
            continue
        url = body["url"]
        tcp = TCP.match(url)
        if tcp and not 0 < int(tcp.group(2)) < 65536:
            r.err(path, f"bad endpoint {url!r}: port {int(tcp.group(2))} is outside 1..65535")
            continue
        if not (url == "ipc" or url.startswith("ipc:///") or tcp):
            r.err(
                path,
                f"bad endpoint {url!r}: use ipc (a path in the run directory), "
                "ipc:///absolute/path or tcp://HOST:PORT",
            )
            continue
        too_long = (
            url == "ipc"
            and len(ipc_path("/", name).encode()) > SUN_PATH_MAX
            or url.startswith("ipc:///")
            and len(url[6:].encode()) > SUN_PATH_MAX
        )
        if too_long:
            r.err(
                path,
                f"ipc endpoint {name!r} is over the {SUN_PATH_MAX}-byte limit of a "
                "unix socket path; use a shorter " + ("name" if url == "ipc" else "path"),
            )
            continue
        where = url if url != "ipc" else f"ipc:{name}"  # "ipc" is per name: unique
        if where in seen:
            r.err(
                path,
                f"endpoint {name!r} has the same address as {seen[where]!r}; "
                "give each endpoint its own address",
            )
        seen[where] = name
        curve = body.get("curve", "required" if tcp else "off")
        if isinstance(curve, bool):
            curve = "required" if curve else "off"
        if curve not in ("required", "off"):
            r.err(path + ("curve",), f"curve must be required or off, got {curve!r}")
        elif curve == "required" and not tcp:
            r.err(path + ("curve",), "CURVE applies to tcp:// endpoints only; remove it")
        elif curve == "required":
            missing = [k for k in ("server_key", "allow") if not body.get(k)]
            if missing:
                r.err(
                    path,
                    f"tcp endpoint {name!r} requires CURVE but has no "
                    f"{' or '.join(missing)}: add server_key: (public key file of the "
                    "node that binds it) and allow: (directory of allowed client public "
                    "keys), made with `rtinfer keys generate DIR --name NAME`; "
                    "or set curve: off for a trusted loopback link",
                )
        out[name] = Endpoint(
            name, url, curve == "required", body.get("server_key"), body.get("allow")
        )
    return out


def _nodes(r: Report, data: list, hosts: dict, robot_of: dict[str, int]) -> list[NodeSpec]:
    out: list[NodeSpec] = []
    names: dict[str, int] = {}
    for i, body in enumerate(data):
        path = ("nodes", i)
        if (
            not check_fields(r, body, path, NODE_KEYS, required=("name", "entry"))
            or not isinstance(body.get("name"), str)
            or not isinstance(body.get("entry"), str)
        ):
            continue
        name = body["name"]
        if name in names:
            r.err(path + ("name",), f"duplicate node name {name!r} (also nodes[{names[name]}])")
        names[name] = i
        args = body.get("args") or []
        for j, a in enumerate(args):
            if not is_type(a, (str, int, float)):
                r.err(path + ("args", j), f"args must be strings or numbers, got {a!r}")
        cpus = body.get("cpus")
        if cpus is not None and (not cpus or not all(is_type(c, int) and c >= 0 for c in cpus)):
            r.err(path + ("cpus",), "cpus must be a non-empty list of CPU numbers >= 0")
        prio = body.get("priority")
        if is_type(prio, int) and not 1 <= prio <= 99:
            r.err(path + ("priority",), "priority is a SCHED_FIFO priority 1..99 (or null)")
        host = body.get("host")
        if hosts and host is not None and host not in hosts:
            r.err(path + ("host",), f"unknown host {host!r}; hosts: {', '.join(hosts)}")
        after = body.get("after") or []
        if not all(isinstance(a, str) for a in after):
            r.err(path + ("after",), "after must be a list of node names")
        out.append(
            NodeSpec(
                name=name,
                entry=body["entry"],
                args=tuple(as_text(a) for a in args),
                host=host,
                cpus=tuple(cpus) if cpus else None,
                priority=prio if is_type(prio, int) else None,
                required=body.get("required", True),
                restart=_restart(r, path, body.get("restart")),
                after=tuple(after),
                stop_grace_s=_seconds(
                    r,
                    path,
                    "stop_grace_s",
                    body.get("stop_grace_s", 5.0),
                    "seconds from SIGTERM to SIGKILL",
                    5.0,
                ),
                ready_s=_seconds(
                    r,
                    path,
                    "ready_s",
                    body.get("ready_s", 0.0),
                    "seconds the next nodes wait for this one's first line",
                ),
                curve_secret=body.get("curve_secret"),
                robot=robot_of.get(name),
                line=r.line(path),
            )
        )
    if not data:
        r.err(("nodes",), "no nodes: list at least one")
    return out


def _seconds(r: Report, path: tuple, key: str, value, what: str, default: float = 0.0) -> float:
    if not is_type(value, float):
        return default  # check_fields has reported it
    if value < 0:
        r.err(path + (key,), f"{key} must be >= 0 ({what})")
    return float(value)


def _restart(r: Report, path: tuple, value) -> RestartPolicy:
    path = path + ("restart",)
    if value is None or value == "never":
        return RestartPolicy()
    if value == "on-failure":
        return RestartPolicy("on-failure")
    if not isinstance(value, dict) or not check_fields(r, value, path, RESTART_KEYS):
        r.err(path, f"restart must be never, on-failure or a mapping, got {value!r}")
        return RestartPolicy()
    if value.get("policy", "on-failure") not in ("never", "on-failure"):
        r.err(path + ("policy",), "policy must be never or on-failure")
    bad = [
        k for k in RESTART_KEYS if k != "policy" and is_type(value.get(k), float) and value[k] < 0
    ]
    for k in bad:
        r.err(path + (k,), f"{k} must be >= 0")
    kw = {k: v for k, v in value.items() if k in RESTART_KEYS and is_type(v, RESTART_KEYS[k])}
    return RestartPolicy(**{"policy": "on-failure", **kw})


def _order(r: Report, nodes: list[NodeSpec]) -> list[NodeSpec]:
    """File order, except that a node starts after the nodes in its `after:` list."""
    by_name = {n.name: n for n in nodes}
    for n in nodes:
        for a in n.after:
            if a not in by_name:
                r.err(("nodes", nodes.index(n), "after"), f"unknown node {a!r} in after:")
    done: list[NodeSpec] = []
    pending = list(nodes)
    while pending:
        ready = [
            n
            for n in pending
            if all(a in {d.name for d in done} or a not in by_name for a in n.after)
        ]
        if not ready:
            r.err(
                ("nodes",),
                "after: dependencies form a cycle among " + ", ".join(n.name for n in pending),
            )
            return done + pending
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def _check_references(r: Report, nodes: list[NodeSpec], endpoints: dict, data: dict) -> None:
    known = set(SCALARS) | {"node.name", "node.curve_secret"}
    known |= {f"{s}.{k}" for s in ("vars", "rates") for k in section(data, s, dict)}
    # every endpoint named in the file, valid or not: a bad one is reported once, where it is
    named = section(data, "endpoints", dict)
    known |= {f"endpoints.{e}{x}" for e in named for x in ("", ".server_key", ".allow")}
    raw = section(data, "nodes", list)
    used_on: dict[str, set] = {}
    for node in nodes:
        i = next(k for k, b in enumerate(raw) if isinstance(b, dict) and b.get("name") == node.name)
        for j, a in enumerate(node.args):
            for m in REF.finditer(a):
                ref = m.group(1).strip()
                if ref not in known:
                    near = difflib.get_close_matches(ref, known, n=1)
                    r.err(
                        ("nodes", i, "args", j),
                        f"unknown reference ${{{ref}}}"
                        + (f"; did you mean ${{{near[0]}}}?" if near else ""),
                    )
                elif ref.startswith("endpoints."):
                    used_on.setdefault(ref.split(".")[1], set()).add(node.host)
                elif ref == "seconds" and data.get("seconds") is None:
                    r.err(
                        ("nodes", i, "args", j),
                        "${seconds} is used but no top-level seconds: is set",
                    )
    for name, hosts in used_on.items():
        if name in endpoints and endpoints[name].url.startswith("ipc") and len(hosts - {None}) > 1:
            r.err(
                ("endpoints", name),
                f"ipc endpoint {name!r} is used by nodes on hosts "
                f"{', '.join(sorted(hosts - {None}))}; ipc works within one host: use tcp://",
            )
