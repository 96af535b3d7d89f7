"""FLEET.yaml: the models, the inference hosts and the robots of a fleet (docs/fleet.md,
"Across hosts").

    version: 1
    name: conveyor-fleet
    models: {conveyor: models/zoo/conveyor-v1}          # name -> model directory on the hosts
    hosts:                                              # inference hosts, one node each
      gpu-1: {model: conveyor, actions: "tcp://10.10.0.1:5556", capacity: 4}
      gpu-2: {model: conveyor, actions: "tcp://10.10.0.2:5556"}
    robots:
      cell-1: {model: conveyor, obs: "tcp://10.10.0.11:5555", host: gpu-1}
      cell-2: {model: conveyor, obs: "tcp://10.10.0.12:5555"}
    keys: keys                 # optional: CURVE (HOST.key_secret on each host, ROBOT.key here)
    run_dir: /tmp/rtinfer-fleet                          # on each host: robots file, allow-list
    node_args: [--threads, "1"]                          # more arguments for every node
    deadline_ms: 100

A host is a Ray node started with the resource `rtinfer_host_NAME` (host_resource: `ray
start --resources '{"rtinfer_host_gpu-1": 1}'`); its node binds `actions` and serves the
robots the controller places on it, at most `capacity` (default: what the node measures).
A robot's `host` is where it goes first when it fits. `load` checks everything it can
without Ray; a problem raises FleetError, one line per problem: FILE:LINE, what, the fix.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from rtinfer.launch.yaml_lines import LaunchError, check_fields, compose_file
from rtinfer.realtime.deadline import DEADLINE_MS

TOP = {
    "version": int,
    "name": str,
    "models": dict,
    "hosts": dict,
    "robots": dict,
    "keys": str,
    "run_dir": str,
    "node_args": list,
    "deadline_ms": (int, float),
}
HOST = {"model": str, "actions": str, "capacity": int}
ROBOT = {"model": str, "obs": str, "host": str}


class FleetError(ValueError):
    """FLEET.yaml is wrong, or a fleet command cannot do what it was asked; the message
    says where and what to do."""


def host_resource(host: str) -> str:
    """The Ray custom resource a Ray node offers to run inference host `host`."""
    return f"rtinfer_host_{host}"


@dataclass(frozen=True)
class Host:
    name: str
    model: str
    actions: str
    capacity: int | None = None


@dataclass(frozen=True)
class Robot:
    name: str
    model: str
    obs: str
    host: str | None = None


@dataclass(frozen=True)
class FleetSpec:
    name: str
    models: dict[str, str]
    hosts: dict[str, Host]
    robots: dict[str, Robot]
    keys: str | None = None
    run_dir: str = "/tmp/rtinfer-fleet"
    node_args: list[str] = field(default_factory=list)
    deadline_ms: float = DEADLINE_MS

    def to_dict(self) -> dict:
        """Plain data (what travels to the Ray actors)."""
        return {
            "name": self.name,
            "models": self.models,
            "keys": self.keys,
            "run_dir": self.run_dir,
            "node_args": self.node_args,
            "deadline_ms": self.deadline_ms,
            "hosts": {h.name: vars(h) for h in self.hosts.values()},
            "robots": {r.name: vars(r) for r in self.robots.values()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> FleetSpec:
        return cls(
            d["name"],
            d["models"],
            {n: Host(**h) for n, h in d["hosts"].items()},
            {n: Robot(**r) for n, r in d["robots"].items()},
            d["keys"],
            d["run_dir"],
            d["node_args"],
            d["deadline_ms"],
        )


def _known(r, path: tuple, value: str, names, what: str, where: str) -> None:
    if value in names:
        return
    near = difflib.get_close_matches(value, list(names), n=1)
    r.err(
        path,
        f"unknown {what} {value!r}"
        + (f"; did you mean {near[0]!r}?" if near else "")
        + f" (declared under {where}: {', '.join(names) or 'none'}; add it there)",
    )


def load(path: str | Path) -> FleetSpec:
    """The fleet of FLEET.yaml at `path`; FleetError names every problem, with its line."""
    if not Path(path).is_file():
        raise FleetError(
            f"{path}: no such fleet file; give the FLEET.yaml that names the "
            f"models, hosts and robots (docs/fleet.md, 'A fleet on Ray')"
        )
    try:
        data, r = compose_file(path)
    except LaunchError as e:
        raise FleetError(str(e)) from None
    check_fields(r, data, (), TOP, required=("models", "hosts", "robots"))
    declared = data.get("models") if isinstance(data.get("models"), dict) else {}
    for name, model in declared.items():
        if not isinstance(model, str):
            r.err(("models", name), "a model is the path of its directory (on the hosts)")
    hosts, robots = {}, {}
    for name, h in (data.get("hosts") or {}).items():
        if check_fields(r, h, ("hosts", name), HOST, required=("model", "actions")):
            _known(r, ("hosts", name, "model"), h.get("model"), declared, "model", "models")
            if "://" not in str(h.get("actions")):
                r.err(("hosts", name, "actions"), "an endpoint, e.g. tcp://10.10.0.1:5556")
            hosts[name] = Host(name, h.get("model"), h.get("actions"), h.get("capacity"))
    for name, b in (data.get("robots") or {}).items():
        if check_fields(r, b, ("robots", name), ROBOT, required=("model", "obs")):
            _known(r, ("robots", name, "model"), b.get("model"), declared, "model", "models")
            if "host" in b:
                _known(r, ("robots", name, "host"), b["host"], hosts, "host", "hosts")
            if "://" not in str(b.get("obs")):
                r.err(("robots", name, "obs"), "an endpoint, e.g. tcp://10.10.0.11:5555")
            robots[name] = Robot(name, b.get("model"), b.get("obs"), b.get("host"))
    if r.errors:
        raise FleetError("\n".join(m for _, m in sorted(r.errors)))
    return FleetSpec(
        data.get("name", Path(path).stem),
        dict(declared),
        hosts,
        robots,
        data.get("keys"),
        data.get("run_dir", "/tmp/rtinfer-fleet"),
        [str(a) for a in data.get("node_args", [])],
        float(data.get("deadline_ms", DEADLINE_MS)),
    )
