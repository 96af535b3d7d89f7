"""A whole fleet on one machine, for tests, the demo and the failover bench: each inference
host a Ray node (the head, a `ray.cluster_utils.Cluster`, runs the controller only), each
robot a real process (controllers.bench_robot, started by module name: it ranks above
rtinfer) that replays the model's recorded observations and checks every waypoint with the
controller's own rules, following the chunks addressed to it from any host's action endpoint.

Two layouts. By default every host is a Ray node of the Cluster on this machine's network
(ipc endpoints, or loopback tcp with CURVE). With `netns` (root) every host is a network
namespace of its own (rtinfer.fleet.lan) running `ray start` there, and the robots another:
all traffic is tcp between the namespaces, and a host can be cut off the head while its
robots still reach it (`partition`). `kill_host` ends a host's Ray node (its raylet, workers
and so its node process, as a host lost); `kill_node` kills the node process only.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
from ray.cluster_utils import Cluster

from rtinfer.fleet.controller import (
    CONTROLLER,
    NAMESPACE,
    host_actor_name,
    ray_settings,
    start_controller,
)
from rtinfer.fleet.host import child_preexec
from rtinfer.fleet.lan import FleetLan
from rtinfer.fleet.spec import FleetError, FleetSpec, Host, Robot, host_resource
from rtinfer.transport.curve import generate
from rtinfer.transport.wire import now_ns

ROBOT = "controllers.bench_robot"
READY_S = 120.0
RAY_STORE_BYTES = 100 << 20  # a host's object store (Ray's least is ~75 MiB; it holds nothing)


def local_spec(
    run_dir: Path,
    model: str,
    hosts: int,
    robots: int,
    node_args: list[str],
    deadline_ms: float,
    capacity: int | None = None,
    curve: bool = False,
    lan: FleetLan | None = None,
) -> FleetSpec:
    """Hosts h0.., robots r0..; every endpoint ipc under run_dir, or (curve) tcp with a key
    pair per host and robot in run_dir/keys, each host and robot on a loopback address of
    its own (127.A.B.x, A and B drawn: a port asked of the kernel may be Ray's by the time
    the node binds it), or (lan) tcp on the namespaces' addresses (a port per robot)."""
    net = f"127.{random.randrange(2, 255)}.{random.randrange(1, 255)}"

    def ep(name: str, last: int, port: int) -> str:
        if lan is not None:
            return (
                f"tcp://{lan.addr[name]}:{port}"
                if name in lan.addr
                else f"tcp://{lan.addr['robots']}:{port + last}"
            )
        return f"tcp://{net}.{last}:{port}" if curve else f"ipc://{run_dir}/{name}"

    spec = FleetSpec(
        "local",
        {"policy": model},
        {
            f"h{i}": Host(
                f"h{i}", "policy", ep(f"h{i}" if lan else f"act-h{i}", 1 + i, 5556), capacity
            )
            for i in range(hosts)
        },
        {
            f"r{i}": Robot(f"r{i}", "policy", ep(f"obs-r{i}", 101 + i, 5555), f"h{i % hosts}")
            for i in range(robots)
        },
        str(run_dir / "keys") if curve else None,
        str(run_dir),
        node_args,
        deadline_ms,
    )
    if curve:
        for name in (*spec.hosts, *spec.robots):
            generate(run_dir / "keys", name)
    return spec


def robots_curve_map(spec: FleetSpec) -> Path:
    """The robots' curve.json: each binds its obs endpoint with its own key, allowing every
    host's key (robot-allow/); each host's action endpoint is trusted by that host's key."""
    keys, allow = Path(spec.keys), Path(spec.run_dir) / "robot-allow"
    allow.mkdir(exist_ok=True)
    for h in spec.hosts:
        shutil.copy(keys / f"{h}.key", allow)
    table = {
        r.obs: {"server_key": str(keys / f"{r.name}.key"), "allow": str(allow)}
        for r in spec.robots.values()
    }
    table.update(
        {h.actions: {"server_key": str(keys / f"{h.name}.key")} for h in spec.hosts.values()}
    )
    path = Path(spec.run_dir) / "robots-curve.json"
    path.write_text(json.dumps(table))
    return path


def where_it_is(st: dict | None) -> str:
    """A fleet's status in one line: each host's state and robots, the robots not placed
    and the last three events (a timeout's message: the whole status is kilobytes)."""
    if st is None:
        return "the controller did not answer"
    hosts = ", ".join(
        f"{h} {x['state']} {len(x['robots'])} robots"
        + (f" capacity {x['capacity']}" if x.get("capacity") is not None else "")
        for h, x in st["hosts"].items()
    )
    unplaced = sorted(
        f"{r} {x['state']}" for r, x in st["robots"].items() if x["state"] != "placed"
    )
    last = [text for _, text in st.get("events", [])[-3:]]
    return (
        f"hosts: {hosts}; robots not placed: {', '.join(unplaced) or 'none'}; last events: {last}"
    )


class LocalFleet:
    """Start with `with LocalFleet(...) as fleet:`; everything (robots, Ray) is stopped at
    the end, whatever happened. Not thread-safe."""

    def __init__(
        self,
        model: str,
        *,
        hosts: int,
        robots: int,
        rate_hz: float = 20.0,
        deadline_ms: float = 100.0,
        node_args: tuple = ("--threads", "1"),
        capacity: int | None = None,
        quiet: bool = True,
        stream: str | None = None,
        robot_file: str = "examples.conveyor_sorting:robot.yaml",
        curve: bool = False,
        netns: bool = False,
    ) -> None:
        """model: the policy's directory; stream: its recorded obs bodies (default: the
        model's obs_stream.npz); robot_file: the robots' axes (docs/robots.md); curve: tcp
        with CURVE, a key per host and robot (else ipc, or plain tcp with netns); netns:
        each host and the robots in a network namespace of their own (module doc; root)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="rtinfer-fleet-ray-")
        self.run_dir = Path(self._tmp.name)
        self.lan = FleetLan(hosts) if netns else None
        self.spec = local_spec(
            self.run_dir,
            model,
            hosts,
            robots,
            list(node_args),
            deadline_ms,
            capacity,
            curve,
            self.lan,
        )
        self.model, self.rate_hz, self.quiet = model, rate_hz, quiet
        self.stream = stream or str(Path(model) / "obs_stream.npz")
        self.robot_file = robot_file
        self.cluster: Cluster | None = None
        self.nodes: dict[str, object] = {}  # host -> its Ray node (netns: `ray start`)
        self.robots: dict[str, subprocess.Popen] = {}
        self.controller = None

    def __enter__(self) -> LocalFleet:
        # ray.init installs SIGTERM/SIGINT handlers in this process and leaves them after
        # ray.shutdown: put the caller's back in close()
        self._handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        head = {"num_cpus": 1, "include_dashboard": False, "_system_config": ray_settings()}
        if self.lan is not None:
            self.lan.create()
            head["node_ip_address"] = self.lan.head
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=not self.quiet)
        for name in self.spec.hosts:  # netns: one `ray start` at a time (below)
            self.add_host(name)
            if self.lan is not None:
                self._joined([name])
        self.controller = start_controller(self.spec)

    def _joined(self, hosts: list[str], tries: int = 3) -> None:
        """netns: wait for these hosts' Ray nodes to join; one whose `ray start` ended (its
        raylet marked dead while starting on a busy machine: Ray's health checks are 0.6 s
        here; or not registered within Ray's own 30 s) is started again, up to `tries`
        times. Hosts are started one at a time: three `ray start`s at once, each with its
        agents, beside five busy loops on 2 cores, left one unregistered after 30 s.
        FleetError with its log's tail."""
        left = dict.fromkeys(hosts, tries - 1)
        end = time.monotonic() + READY_S
        while missing := [h for h in hosts if host_resource(h) not in ray.cluster_resources()]:
            for h in missing:
                if self.nodes[h].poll() is None:
                    continue
                if not left[h] or time.monotonic() > end:
                    tail = (self.run_dir / f"ray-{h}.log").read_text().splitlines()[-3:]
                    raise FleetError(f"host {h}'s Ray node did not join: {' | '.join(tail)}")
                left[h] -= 1
                self.add_host(h)
            if time.monotonic() > end:
                raise FleetError(
                    f"hosts {', '.join(missing)}: their Ray nodes did not join "
                    f"in {READY_S:.0f} s (see {self.run_dir}/ray-*.log)"
                )
            time.sleep(0.5)

    def wait(self, what, timeout_s: float = READY_S, every_s: float = 0.2) -> dict:
        """Poll the controller's status until what(status) is true; the status.
        TimeoutError with the last status when it does not come."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                st = self.status()
            except ray.exceptions.RayError:  # the controller restarting: ask again
                st = None
            if st is not None and what(st):
                return st
            if time.monotonic() > end:
                raise TimeoutError(
                    f"the fleet did not get there in {timeout_s:g} s: "
                    f"{where_it_is(st)} (status: rtinfer fleet status --json)"
                )
            time.sleep(every_s)

    def status(self) -> dict:
        return ray.get(self.controller.status.remote(), timeout=30)

    def start_robots(self, seconds: float) -> int:
        """Start every robot; each publishes for `seconds` from the returned start time
        (CLOCK_MONOTONIC ns) and records what comes back (records())."""
        acts = [h.actions for h in self.spec.hosts.values()]
        if self.spec.keys:
            cmap = robots_curve_map(self.spec)
        on_host = (lambda cmd: self.lan.argv("robots", cmd)) if self.lan else (lambda cmd: cmd)
        for i, (name, robot) in enumerate(self.spec.robots.items()):
            self.robots[name] = subprocess.Popen(
                on_host(
                    [
                        sys.executable,
                        "-m",
                        ROBOT,
                        "--name",
                        name,
                        "--obs",
                        robot.obs,
                        "--actions",
                        *acts,
                        "--addressed",
                        "--model",
                        self.model,
                        "--stream",
                        self.stream,
                        "--robot",
                        self.robot_file,
                        "--offset",
                        str(i * 53),
                        "--rate-hz",
                        str(self.rate_hz),
                        "--phase-ms",
                        f"{(i * 7.3) % (1e3 / self.rate_hz):.3f}",
                        "--deadline-ms",
                        str(self.spec.deadline_ms),
                        "--out",
                        str(self.run_dir / f"{name}.npz"),
                        *(
                            [
                                "--curve-secret",
                                f"{self.spec.keys}/{name}.key_secret",
                                "--curve-map",
                                str(cmap),
                            ]
                            if self.spec.keys
                            else []
                        ),
                    ]
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                preexec_fn=child_preexec,  # a bench killed ends its robots' runs
            )
        for name, p in self.robots.items():  # "ready" once its sockets are up
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"robot {name} did not start (exit {p.wait()})")
        start = now_ns() + 200_000_000
        end = start + int(seconds * 1e9)
        for p in self.robots.values():
            p.stdin.write(
                json.dumps({"start_ns": start, "measure_ns": start, "end_ns": end}) + "\n"
            )
            p.stdin.close()
        return start

    def end_robots(self) -> None:
        """End every robot's run now (SIGTERM: each keeps receiving for a deadline, then
        writes its record), as if `start_robots` had been given until now."""
        for p in self.robots.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def records(self, timeout_s: float = 60.0) -> dict[str, dict]:
        """Wait for every robot's end; robot -> its record (the arrays of bench_robot's
        .npz, and its controller's counters)."""
        out = {}
        for name, p in self.robots.items():
            p.wait(timeout=timeout_s)
            with np.load(self.run_dir / f"{name}.npz", allow_pickle=False) as z:
                rec = {k: z[k] for k in z.files}
            rec["counters"] = json.loads(str(rec["counters"]))
            out[name] = rec
        self.robots.clear()
        return out

    def kill_host(self, host: str) -> int:
        """The whole host dies: its inference node (SIGKILL), then its Ray node (raylet and
        workers; Ray's own workers take a moment to go, hence the node first; netns: every
        process in its namespace); when it happened (CLOCK_MONOTONIC ns)."""
        t = self.kill_node(host)
        node = self.nodes.pop(host)
        if self.lan is not None:
            self.lan.kill(host)
            node.wait()
        else:
            self.cluster.remove_node(node, allow_graceful=False)
        return t

    def kill_node(self, host: str) -> int:
        """SIGKILL host's inference node process only (its Ray node lives on); when."""
        actor = ray.get_actor(host_actor_name(host), namespace=NAMESPACE)
        pid = ray.get(actor.poll.remote(), timeout=30)["pid"]
        t = now_ns()
        os.kill(pid, signal.SIGKILL)
        return t

    def add_host(self, host: str) -> None:
        """The host's Ray node (back) in the cluster: the controller starts its node. netns:
        `ray start` on the host's namespace, joining the head (it takes a few seconds)."""
        resources = {host_resource(host): 1}
        if self.lan is None:
            self.nodes[host] = self.cluster.add_node(num_cpus=0, resources=resources)
            return
        log = open(self.run_dir / f"ray-{host}.log", "a")
        self.nodes[host] = self.lan.popen(
            host,
            [
                str(Path(sys.executable).with_name("ray")),
                "start",
                "--block",
                "--address",
                self.cluster.address,
                "--node-ip-address",
                self.lan.addr[host],
                "--num-cpus",
                "0",
                "--resources",
                json.dumps(resources),
                "--object-store-memory",
                str(RAY_STORE_BYTES),
                "--disable-usage-stats",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def partition(self, host: str, cut: bool) -> int:
        """netns only: cut `host` off the head (the controller), its robots still reaching
        it, or heal that; when (CLOCK_MONOTONIC ns). Ray ends a host it marked dead once
        it hears from it again: after a heal the host is lost, as after a crash."""
        self.lan.partition(host, cut)
        return now_ns()

    def close(self) -> None:
        for p in self.robots.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        self.robots.clear()
        if ray.is_initialized():
            try:
                if self.controller is not None:
                    ray.get(self.controller.down.remote(), timeout=60)
                    ray.kill(ray.get_actor(CONTROLLER, namespace=NAMESPACE))
            except Exception:  # noqa: BLE001 - the cluster goes down next whatever happened
                pass
            ray.shutdown()
        if self.lan is not None:
            self.lan.remove()  # the hosts' Ray nodes with it
            for node in self.nodes.values():
                node.wait()
            self.nodes.clear()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        for sig, handler in getattr(self, "_handlers", {}).items():
            signal.signal(sig, handler)
        self._tmp.cleanup()
