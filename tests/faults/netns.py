"""Two Linux network namespaces joined by a veth pair: a two-host test bench on one machine.

    with HostPair("rti") as hp:            # namespaces rti-a (10.231.0.1), rti-b (10.231.0.2)
        p = hp.popen("a", [sys.executable, "-m", "x"])   # a process "on host a"
        hp.link(False)                     # cut: the veth link set down
        hp.link(True)                      # heal

Only the addresses of SUBNET are used, and only inside the namespaces created here (each
also gets its own loopback). Commands are argument lists run through `ip`; never a shell.
Needs root and the `ip` tool: `available()` says why not, so tests can skip with a reason.
Not thread-safe; remove() is idempotent and also runs on context exit.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Sequence

SUBNET = "10.231.0.0/30"
ADDRS = {"a": "10.231.0.1", "b": "10.231.0.2"}


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


class HostPair:
    """Namespaces `<prefix>-a` and `<prefix>-b`, veth `<prefix>a`/`<prefix>b` between them."""

    def __init__(self, prefix: str = "rti"):
        if not prefix.isalnum() or len(prefix) > 10:
            raise ValueError("prefix: up to 10 letters/digits (it names interfaces)")
        self.ns = {h: f"{prefix}-{h}" for h in ADDRS}
        self.dev = {h: f"{prefix}{h}" for h in ADDRS}
        self.addr = dict(ADDRS)
        self._made = False

    def create(self) -> "HostPair":
        self.remove()  # leftovers of a killed run
        self._made = True
        for h in ADDRS:
            _ip("netns", "add", self.ns[h])
        _ip("link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
        for h in ADDRS:
            _ip("link", "set", self.dev[h], "netns", self.ns[h])
            _ip("-n", self.ns[h], "addr", "add", f"{self.addr[h]}/30", "dev", self.dev[h])
            _ip("-n", self.ns[h], "link", "set", "lo", "up")
            _ip("-n", self.ns[h], "link", "set", self.dev[h], "up")
        return self

    def remove(self) -> None:
        """Delete both namespaces (the veth pair goes with them); ignores what is absent."""
        for h in ADDRS:
            _ip("netns", "del", self.ns[h], check=False)
        self._made = False

    def link(self, up: bool) -> None:
        """Set host a's end of the veth link up or down (down = a full partition)."""
        _ip("-n", self.ns["a"], "link", "set", self.dev["a"], "up" if up else "down")

    def argv(self, host: str, cmd: Sequence[str]) -> list[str]:
        """`cmd` wrapped to run inside host's namespace."""
        return ["ip", "netns", "exec", self.ns[host], *cmd]

    def popen(self, host: str, cmd: Sequence[str], **kw) -> subprocess.Popen:
        """Start `cmd` (an argument list, never a shell string) inside host's namespace."""
        return subprocess.Popen(self.argv(host, cmd), **kw)

    def run(self, host: str, cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(host, cmd), **kw)

    def __enter__(self) -> "HostPair":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()
