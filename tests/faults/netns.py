"""Two Linux network namespaces joined by a veth pair: a two-host test bench on one machine.

    with HostPair("rti") as hp:            # namespaces rti-a (10.231.0.1), rti-b (10.231.0.2)
        p = hp.popen("a", [sys.executable, "-m", "x"])   # a process "on host a"
        hp.link(False)                     # cut: the veth link set down
        hp.link(True)                      # heal

Only the addresses of SUBNET are used, and only inside the namespaces created here (each
also gets its own loopback). Commands are argument lists run through `ip`; never a shell.
A LAN of several hosts (one node host, robots on a bridge in it, one veth pair each):

    with Lan("rtl", robots=3) as lan:      # rtl-n (10.231.1.1), rtl-r1 .. rtl-r3 (10.231.1.11..)
        lan.popen("n", [...]); lan.popen("r2", [...])
        lan.link("r2", False)              # cut robot 2 off the LAN

Needs root and the `ip` tool: `available()` says why not, so tests can skip with a reason.
Not thread-safe; remove() is idempotent and also runs on context exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

SUBNET = "10.231.0.0/30"
ADDRS = {"a": "10.231.0.1", "b": "10.231.0.2"}
LAN_SUBNET = "10.231.1.0/24"  # Lan: the node host .1, robot k .(10 + k)


def available() -> str | None:
    """None if namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` tool (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


class _Namespaces:
    """What HostPair and Lan share: `self.ns` {host: namespace}; running commands in them."""

    ns: dict[str, str]

    def argv(self, host: str, cmd: Sequence[str]) -> list[str]:
        """`cmd` wrapped to run inside host's namespace."""
        return ["ip", "netns", "exec", self.ns[host], *cmd]

    def popen(self, host: str, cmd: Sequence[str], **kw) -> subprocess.Popen:
        """Start `cmd` (an argument list, never a shell string) inside host's namespace."""
        return subprocess.Popen(self.argv(host, cmd), **kw)

    def run(self, host: str, cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(host, cmd), **kw)

    def remove(self) -> None:
        """Delete every namespace (the veth pairs go with them); ignores what is absent."""
        for ns in self.ns.values():
            _ip("netns", "del", ns, check=False)

    def _add(self, host: str) -> None:
        _ip("netns", "add", self.ns[host])
        _ip("-n", self.ns[host], "link", "set", "lo", "up")

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()


def _check_prefix(prefix: str, longest: int) -> None:
    if not prefix.isalnum() or len(prefix) > longest:
        raise ValueError(f"prefix: up to {longest} letters/digits (it names interfaces)")


class HostPair(_Namespaces):
    """Namespaces `<prefix>-a` and `<prefix>-b`, veth `<prefix>a`/`<prefix>b` between them."""

    def __init__(self, prefix: str = "rti"):
        _check_prefix(prefix, 10)
        self.ns = {h: f"{prefix}-{h}" for h in ADDRS}
        self.dev = {h: f"{prefix}{h}" for h in ADDRS}
        self.addr = dict(ADDRS)

    def create(self) -> HostPair:
        self.remove()  # leftovers of a killed run
        for h in ADDRS:
            self._add(h)
        _ip("link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
        for h in ADDRS:
            _ip("link", "set", self.dev[h], "netns", self.ns[h])
            _ip("-n", self.ns[h], "addr", "add", f"{self.addr[h]}/30", "dev", self.dev[h])
            _ip("-n", self.ns[h], "link", "set", self.dev[h], "up")
        return self

    def link(self, up: bool) -> None:
        """Set host a's end of the veth link up or down (down = a full partition)."""
        _ip("-n", self.ns["a"], "link", "set", self.dev["a"], "up" if up else "down")


class Lan(_Namespaces):
    """A node host `<prefix>-n` (10.231.1.1 on bridge `<prefix>br`) and robot hosts
    `<prefix>-r1` .. `-rN` (10.231.1.11 ..), each on a veth pair whose node end is on the
    bridge: robots reach the node and each other, as on one switch; nothing else."""

    def __init__(self, prefix: str = "rtl", robots: int = 2):
        _check_prefix(prefix, 8)
        if not 1 <= robots <= 99:
            raise ValueError("robots: 1 to 99")
        hosts = ["n"] + [f"r{k}" for k in range(1, robots + 1)]
        self.ns = {h: f"{prefix}-{h}" for h in hosts}
        self.addr = {
            "n": "10.231.1.1",
            **{f"r{k}": f"10.231.1.{10 + k}" for k in range(1, robots + 1)},
        }
        self.bridge = f"{prefix}br"
        self.dev = {h: (f"{prefix}{h}", f"{prefix}n{h}") for h in hosts[1:]}  # (robot, node end)

    def create(self) -> Lan:
        self.remove()  # leftovers of a killed run
        for h in self.ns:
            self._add(h)
        node = self.ns["n"]
        _ip("-n", node, "link", "add", self.bridge, "type", "bridge")
        _ip("-n", node, "addr", "add", f"{self.addr['n']}/24", "dev", self.bridge)
        _ip("-n", node, "link", "set", self.bridge, "up")
        for h, (dev, peer) in self.dev.items():
            _ip("link", "add", dev, "type", "veth", "peer", "name", peer)
            _ip("link", "set", dev, "netns", self.ns[h])
            _ip("link", "set", peer, "netns", node)
            _ip("-n", node, "link", "set", peer, "master", self.bridge)
            _ip("-n", node, "link", "set", peer, "up")
            _ip("-n", self.ns[h], "addr", "add", f"{self.addr[h]}/24", "dev", dev)
            _ip("-n", self.ns[h], "link", "set", dev, "up")
        return self

    def link(self, robot: str, up: bool) -> None:
        """Set a robot host's link up or down (down: that robot is cut off the LAN)."""
        _ip("-n", self.ns[robot], "link", "set", self.dev[robot][0], "up" if up else "down")
