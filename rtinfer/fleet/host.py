"""One inference host of a fleet: the Ray actor that owns the inference node process on its
Ray node, and the files that tell the node whom to serve.

The controller (rtinfer.fleet.controller) creates one `InferenceHost` per host, on the Ray
node that offers the host's resource (spec.host_resource). The actor starts `python -m
rtinfer.inference.node --robots-file ROBOTS --address-chunks ...` (the model and action
endpoint FLEET.yaml gives the host) and then only writes files: `serve(robots)` writes the
robots' keys into the node's allow-list (CURVE) and the robots file, which the node
watches (rtinfer.inference.robots_file). A robot taken away loses its key before the
robots file drops it, a robot given gets its key before the robots file names it, so the
node never serves a robot it does not hold the key of. Ray never carries an observation
or a chunk. The node process gets SIGTERM when the actor's process dies (PR_SET_PDEATHSIG),
so a Ray node lost takes its node with it, as a host lost does. Not thread-safe: Ray runs
one call at a time (max_concurrency 1).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rtinfer.fleet.spec import FleetSpec
from rtinfer.transport.bus import Subscriber
from rtinfer.transport.curve import CurveConfig

READY_S = 120.0  # a node loading its model on a busy host takes a while
HEALTH_HZ = 10.0  # the node's health: its refusals and capacity reach the controller this fast
PR_SET_PDEATHSIG = 1
ROBOT_COUNTERS = (
    "robot.",
    "robots",
    "obs_",
    "overloads",
    "cycles",
    "capacity",
    "publish_dropped",
    "waypoints",
)  # polled


def child_preexec() -> None:  # in the child, before exec
    """A node (or a bench's robot) gets SIGTERM when its parent dies (the host's actor, the
    bench), and runs at niceness 0 where the parent runs niced (a Ray worker: 15 unless the
    cluster's `worker_niceness` is 0) and may lower it (root, or CAP_SYS_NICE); else it
    keeps the parent's niceness, which `start` reports for a node."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        pass


def write_atomically(path: Path, text: str) -> None:
    """Readers (the node, libzmq's ZAP handler) see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class InferenceHost:
    def __init__(self, host: str, spec: dict, robot_keys: dict[str, str]) -> None:
        """host: its name in FLEET.yaml; spec: FleetSpec.to_dict(); robot_keys: robot ->
        its public key file's text (CURVE; {} without keys): its node connects to a robot's
        obs endpoint trusting it."""
        self.spec = FleetSpec.from_dict(spec)
        self.host = self.spec.hosts[host]
        self.dir = Path(self.spec.run_dir) / host
        self.allow = self.dir / "allow"
        self.allow.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.robots_file = self.dir / "robots.json"
        write_atomically(self.robots_file, "{}")
        for stale in self.allow.glob("*.key"):  # a previous run's robots: served by none
            stale.unlink()
        self.robot_keys = robot_keys
        self.serving: dict[str, str] = {}  # robot -> its obs endpoint
        self.proc: subprocess.Popen | None = None
        self.health: dict = {}
        self._health_sub: Subscriber | None = None

    # --- the node process ----------------------------------------------------------------
    def _command(self) -> list[str]:
        s, h = self.spec, self.host
        cmd = [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            s.models[h.model],
            "--robots-file",
            str(self.robots_file),
            "--actions",
            h.actions,
            "--name",
            f"policy-{h.name}",
            "--address-chunks",
            "--deadline-ms",
            str(s.deadline_ms),
            "--health-hz",
            str(HEALTH_HZ),
            *s.node_args,
        ]
        if s.keys:
            cmd += [
                "--curve-secret",
                str(Path(s.keys) / f"{h.name}.key_secret"),
                "--curve-map",
                str(self._curve_map()),
            ]
        return cmd

    def _curve_map(self) -> Path:
        """curve.json for the node: its action endpoint (its key, the allow-list) and every
        robot's obs endpoint (that robot's key), so any robot can be placed on it."""
        keys = self.dir / "robot_keys"
        keys.mkdir(exist_ok=True)
        server_key = str(Path(self.spec.keys) / f"{self.host.name}.key")
        table = {self.host.actions: {"server_key": server_key, "allow": str(self.allow)}}
        for name, robot in self.spec.robots.items():
            if name in self.robot_keys:
                write_atomically(keys / f"{name}.key", self.robot_keys[name])
                table[robot.obs] = {"server_key": str(keys / f"{name}.key")}
        path = self.dir / "curve.json"
        write_atomically(path, json.dumps(table))
        return path

    def start(self) -> dict:
        """Start the node and wait for its ready line; {pid, niceness} of the node (above 0:
        a CPU-bound neighbour starves it). RuntimeError with the node's last error lines if
        it exits first or is not ready within READY_S."""
        log = self.dir / "node.log"
        with open(log, "w") as out, open(log.with_suffix(".err"), "w") as err:
            self.proc = subprocess.Popen(
                self._command(), stdout=out, stderr=err, preexec_fn=child_preexec
            )
        end = time.monotonic() + READY_S
        while "ready" not in log.read_text():
            if self.proc.poll() is not None or time.monotonic() > end:
                tail = log.with_suffix(".err").read_text().strip().splitlines()[-3:]
                self.stop()
                raise RuntimeError(
                    f"host {self.host.name}: its node did not get ready: " + " | ".join(tail)
                )
            time.sleep(0.05)
        curve = None
        if self.spec.keys:  # the node's own key reads its health (on its allow-list as such)
            own = Path(self.spec.keys) / self.host.name
            write_atomically(
                self.allow / f"_host-{self.host.name}.key", Path(f"{own}.key").read_text()
            )
            curve = CurveConfig(f"{own}.key_secret", server_public_key_file=f"{own}.key")
        self._health_sub = Subscriber(self.host.actions, ["health"], curve=curve)
        return {"pid": self.proc.pid, "niceness": os.getpriority(os.PRIO_PROCESS, self.proc.pid)}

    def serve(self, robots: dict[str, str | None]) -> list[str]:
        """Serve exactly these robots from now on (robot -> its public key's text, None
        without CURVE); what it serves. Keys out before names out, keys in before names in
        (module doc)."""
        keep = {r: self.spec.robots[r].obs for r in robots}
        for gone in set(self.serving) - set(keep):
            (self.allow / f"{gone}.key").unlink(missing_ok=True)
        for new in set(keep) - set(self.serving):
            if robots[new] is not None:
                write_atomically(self.allow / f"{new}.key", robots[new])
        write_atomically(self.robots_file, json.dumps(keep))
        self.serving = keep
        return sorted(keep)

    def poll(self) -> dict:
        """{up, exit, pid, serving, capacity (the node's measured one, None until it has
        timed a cycle), refused (robots its node refused), robots (admitted), counters (its
        node's health counters about robots and observations: robot.NAME.*, robots_*,
        obs_*, overloads)}."""
        up = self.proc is not None and self.proc.poll() is None
        if up and self._health_sub is not None:
            env = self._health_sub.poll_latest(0).get("health")
            if env is not None:
                self.health = env.body["counters"]
        c = self.health
        refused = sorted(
            k[len("robot.") : -len(".refused")]
            for k in c
            if k.startswith("robot.") and k.endswith(".refused")
        )
        return {
            "up": up,
            "exit": None if self.proc is None else self.proc.poll(),
            "pid": None if self.proc is None else self.proc.pid,
            "serving": sorted(self.serving),
            "capacity": c.get("capacity"),
            "refused": [r for r in refused if r in self.serving],
            "robots": c.get("robots", 0),
            "cycles": c.get("cycles", 0),
            "counters": {k: v for k, v in c.items() if k.startswith(ROBOT_COUNTERS)},
        }

    def kill_node(self) -> None:
        """Fault injection (the failover bench): SIGKILL the node process, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM the node and wait (SIGKILL after 10 s); nothing served after."""
        if self._health_sub is not None:
            self._health_sub.close()
            self._health_sub = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
