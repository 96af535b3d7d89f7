"""A local fleet's hosts in network namespaces: one machine, the network of several.

    lan = FleetLan(hosts=3).create()   # bridge rtfKbr (10.233.K.1: Ray's head, the controller)
    lan.popen("h0", [...])             # a process on host h0 (namespace rtfK-h0, 10.233.K.10)
    lan.popen("robots", [...])         # the robots' host (rtfK-robots, 10.233.K.2)
    lan.partition("h0", True)          # h0 and the head no longer reach each other
    lan.kill("h0")                     # every process on h0 (SIGKILL): the host is lost
    lan.remove()

Each host, and the robots, get a namespace of their own on one bridge in this machine's
namespace, where Ray's head runs. Traffic stays on 10.233.K.0/24 (K drawn per fleet) and the
namespaces made here. A partition is two blackhole routes, one on each side: the head's
namespace drops what it sends to the host and the host drops what it sends to the head,
while the bridge still carries robot <-> host traffic (it is switched, not routed). Needs
root and iproute2 (`why_not()` says which is missing). Commands are argument lists run
through `ip`, never a shell. Not thread-safe; remove() is idempotent.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from collections.abc import Sequence

from rtinfer.fleet.spec import FleetError


def why_not() -> str | None:
    """None if namespaces can be made here, else why not (with the fix)."""
    if os.geteuid() != 0:
        return "network namespaces need root: run as root, or without --netns"
    if shutil.which("ip") is None:
        return "the `ip` tool is missing: install iproute2, or run without --netns"
    return None


def _ip(*args: str, check: bool = True) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise FleetError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class FleetLan:
    def __init__(self, hosts: int) -> None:
        why = why_not()
        if why is not None:
            raise FleetError(why)
        k = random.randrange(1, 255)
        self.net = f"10.233.{k}"
        self.head = f"{self.net}.1"
        self.bridge = f"rtf{k}br"
        names = ["robots", *(f"h{i}" for i in range(hosts))]
        self.ns = {h: f"rtf{k}-{h}" for h in names}
        self.addr = {
            "robots": f"{self.net}.2",
            **{f"h{i}": f"{self.net}.{10 + i}" for i in range(hosts)},
        }
        self.dev = {h: (f"rtf{k}{h[:3]}", f"rtf{k}{h[:3]}p") for h in names}  # (inside, bridge)
        self.cut: set[str] = set()

    def create(self) -> FleetLan:
        self.remove()  # a killed run's leftovers
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.head}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for h, ns in self.ns.items():
            inside, port = self.dev[h]
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", inside, "type", "veth", "peer", "name", port)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", port, "master", self.bridge)
            _ip("link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[h]}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
        return self

    def argv(self, host: str, cmd: Sequence[str]) -> list[str]:
        """`cmd` run on `host` (inside its namespace)."""
        return ["ip", "netns", "exec", self.ns[host], *cmd]

    def popen(self, host: str, cmd: Sequence[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(host, cmd), **kw)

    def pids(self, host: str) -> list[int]:
        r = subprocess.run(["ip", "netns", "pids", self.ns[host]], capture_output=True, text=True)
        return [int(p) for p in r.stdout.split()]

    def kill(self, host: str) -> None:
        """SIGKILL every process on `host`, as a host lost (its Ray node, workers, node)."""
        for pid in self.pids(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def partition(self, host: str, cut: bool) -> None:
        """Cut (or heal) `host` off the head: robots still reach it, the head does not."""
        if cut == (host in self.cut):
            return
        verb = "add" if cut else "del"
        _ip("route", verb, "blackhole", f"{self.addr[host]}/32")
        _ip("-n", self.ns[host], "route", verb, "blackhole", f"{self.head}/32")
        (self.cut.add if cut else self.cut.discard)(host)

    def remove(self) -> None:
        """Every process in the namespaces killed, the namespaces, bridge and routes gone."""
        for h in self.ns:
            if os.path.exists(f"/run/netns/{self.ns[h]}"):
                self.kill(h)
            _ip("netns", "del", self.ns[h], check=False)
            _ip("link", "del", self.dev[h][1], check=False)
            _ip("route", "del", "blackhole", f"{self.addr[h]}/32", check=False)
        _ip("link", "del", self.bridge, check=False)
        self.cut.clear()
