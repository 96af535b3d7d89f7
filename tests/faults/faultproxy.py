"""A small fault-injecting TCP proxy for fault tests: delay, jitter, stall, cut.

    proxy = FaultProxy(("127.0.0.1", 0), ("10.231.0.1", 5556), lifetime_s=120)
    port = proxy.start()
    proxy.set(delay_s=0.15, jitter_s=0.02)    # every byte arrives 150..170 ms late, in order
    proxy.set(stalled=True)                   # bytes queue up, nothing passes (a lossy link
                                              # under TCP retransmission looks like this)
    proxy.cut()                               # close every open connection (peers reconnect)
    proxy.close()

Bytes are never dropped or reordered while a connection lives (TCP promises that; dropping
would only test the peer's framing). Loss is modelled as a stall; a partition as a cut or,
between namespaces, as the link set down (tests.faults.netns). Safety: it binds and connects only
loopback or the fault-test namespace subnet (tests.faults.netns.SUBNET), and it shuts itself down
after `lifetime_s`. Threads: one acceptor, two pumps and one sender per direction and
connection; `set`, `cut`, `stats` and `close` are thread-safe.

As a process (e.g. inside a namespace, `ip netns exec NS python -m tests.faults.faultproxy ...`)
it reads commands from stdin, one per line: ``delay MS``, ``jitter MS``, ``stall 0|1``,
``cut``, ``quit``; it prints ``listening PORT`` once ready.
"""

from __future__ import annotations

import argparse
import heapq
import ipaddress
import random
import socket
import sys
import threading
import time
from dataclasses import dataclass

from .netns import SUBNET

ALLOWED_NETS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network(SUBNET))


def check_address(host: str) -> str:
    """`host` if it is loopback or in the fault-test subnet; ValueError otherwise."""
    addr = ipaddress.ip_address(host)
    if not any(addr in net for net in ALLOWED_NETS):
        raise ValueError(f"faultproxy only uses 127.0.0.0/8 and {SUBNET}, not {host}")
    return host


@dataclass
class Faults:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    stalled: bool = False


class FaultProxy:
    def __init__(
        self,
        listen: tuple[str, int],
        target: tuple[str, int],
        *,
        lifetime_s: float = 300.0,
        seed: int = 0,
    ):
        self.listen = (check_address(listen[0]), int(listen[1]))
        self.target = (check_address(target[0]), int(target[1]))
        self.faults = Faults()
        self.lifetime_s = lifetime_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closed = threading.Event()
        self._srv: socket.socket | None = None
        self.counters = {"connections": 0, "bytes": 0, "chunks": 0, "cuts": 0}

    def start(self) -> int:
        """Bind, start accepting; returns the listening port."""
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(self.listen)
        self._srv.listen(16)
        self._srv.settimeout(0.2)
        threading.Thread(target=self._accept, name="faultproxy-accept", daemon=True).start()
        return self._srv.getsockname()[1]

    def set(self, **faults) -> None:
        """Change Faults fields (delay_s, jitter_s, stalled); applies to bytes read from now."""
        with self._lock:
            for k, v in faults.items():
                if not hasattr(self.faults, k):
                    raise ValueError(f"unknown fault {k!r}")
                setattr(self.faults, k, v)

    def cut(self) -> None:
        """Close every open connection at once (RST); new connections are still accepted."""
        with self._lock:
            conns, self._conns = self._conns, []
            self.counters["cuts"] += 1
        for s in conns:
            _close(s, rst=True)

    def close(self) -> None:
        self._closed.set()
        self.cut()
        if self._srv is not None:
            _close(self._srv)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------------
    def _accept(self) -> None:
        end = time.monotonic() + self.lifetime_s
        while not self._closed.is_set() and time.monotonic() < end:
            try:
                client, _ = self._srv.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2.0)
            except OSError:
                _close(client, rst=True)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
                self.counters["connections"] += 1
            for a, b in ((client, upstream), (upstream, client)):
                _Pipe(self, a, b).start()
        self.close()  # lifetime over: nothing outlives a test run


class _Pipe:
    """One direction: a reader that timestamps chunks, a sender that releases them late."""

    def __init__(self, proxy: FaultProxy, src: socket.socket, dst: socket.socket):
        self.proxy, self.src, self.dst = proxy, src, dst
        self.queue: list[tuple[float, int, bytes]] = []  # (release time, order, data)
        self.cv = threading.Condition()
        self.order = 0
        self.last_release = 0.0
        self.done = False

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._send, daemon=True).start()

    def _read(self) -> None:
        p = self.proxy
        while True:
            try:
                data = self.src.recv(65536)
            except OSError:
                data = b""
            with self.cv:
                if not data:
                    self.done = True
                    self.cv.notify()
                    return
                f = p.faults
                release = time.monotonic() + f.delay_s + p._rng.uniform(0.0, f.jitter_s)
                self.last_release = release = max(release, self.last_release)  # keep order
                heapq.heappush(self.queue, (release, self.order, data))
                self.order += 1
                p.counters["bytes"] += len(data)
                p.counters["chunks"] += 1
                self.cv.notify()

    def _send(self) -> None:
        while True:
            with self.cv:
                while True:
                    now = time.monotonic()
                    if self.queue and not self.proxy.faults.stalled and self.queue[0][0] <= now:
                        data = heapq.heappop(self.queue)[2]
                        break
                    if self.done and not self.queue:
                        _close(self.dst)
                        return
                    wait = self.queue[0][0] - now if self.queue else 0.05
                    self.cv.wait(min(max(wait, 0.0005), 0.05))
            try:
                self.dst.sendall(data)
            except OSError:
                _close(self.src)
                return


def _close(s: socket.socket, rst: bool = False) -> None:
    try:
        if rst:  # linger 0: the peer sees a reset, as after a crash or a cut cable
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def _hostport(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.faults.faultproxy", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--listen", required=True, help="HOST:PORT (PORT 0: any)")
    ap.add_argument("--target", required=True, help="HOST:PORT")
    ap.add_argument("--lifetime-s", type=float, default=300.0)
    a = ap.parse_args(argv)
    proxy = FaultProxy(_hostport(a.listen), _hostport(a.target), lifetime_s=a.lifetime_s)
    print(f"listening {proxy.start()}", flush=True)
    timer = threading.Timer(a.lifetime_s, proxy.close)
    timer.daemon = True
    timer.start()
    for line in sys.stdin:
        cmd, *arg = line.split() or [""]
        if cmd == "delay":
            proxy.set(delay_s=float(arg[0]) / 1e3)
        elif cmd == "jitter":
            proxy.set(jitter_s=float(arg[0]) / 1e3)
        elif cmd == "stall":
            proxy.set(stalled=arg[0] == "1")
        elif cmd == "cut":
            proxy.cut()
        elif cmd == "quit":
            break
        print(f"ok {cmd}", flush=True)
    proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
