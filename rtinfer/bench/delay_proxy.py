"""A message-level network fault process between a robot and a policy node: each message held
for a delay with jitter, and dropped, duplicated or reordered at given rates.

    python -m rtinfer.bench.delay_proxy --upstream tcp://127.0.0.1:5556 \
        --downstream tcp://127.0.0.1:6556 [--topics action_chunk] [--delay-ms 50] \
        [--jitter-ms 10] [--drop 0.01] [--duplicate 0.01] [--reorder 0.01] \
        [--reorder-ms 100] [--seed 0] [--seconds S] [--stats FILE]

It connects a SUB socket to `--upstream` (the sender binds: the robot's obs endpoint, the
node's action endpoint) and binds a PUB socket on `--downstream`, where the receiver connects
instead. Each ZeroMQ multipart message (topic, envelope, out-of-band frames) is forwarded
whole and unchanged, `delay + U(0, jitter)` after it arrived; with probability `drop` it is
not forwarded, `duplicate` it is forwarded twice (the copy 1 ms after), `reorder` it is held
`reorder_ms` more, so the ones after it overtake it (jitter wider than the gap between two
messages reorders them too, as netem's does). One proxy per direction. On SIGINT/SIGTERM or
after --seconds it stops and prints (and writes to --stats) its counters as one JSON line:
received, forwarded, dropped, duplicated, reordered, and the held time's p50/max in ms.

Why a process and not `tc netem`: this host's kernel has no netem qdisc ("Specified qdisc
kind is unknown"). Where the kernel has it, `tc qdisc add dev lo root netem delay 50ms 10ms
loss 1% duplicate 1% reorder 1%` does the same at the packet level, for every socket: on
TCP, loss and reordering then show as delay (retransmission), not as lost messages.
Plaintext only (no CURVE); loopback and ipc endpoints in rtinfer's benchmarks.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import signal
import sys
import time
from dataclasses import dataclass

import zmq

from rtinfer.realtime.complaints import say

DUPLICATE_AFTER_NS = 1_000_000


@dataclass
class Faults:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_ms: float = 100.0
    seed: int = 0

    def __post_init__(self) -> None:
        wrong = [
            f"{k}={getattr(self, k)}"
            for k in ("delay_ms", "jitter_ms", "reorder_ms")
            if getattr(self, k) < 0
        ]
        wrong += [
            f"{k}={getattr(self, k)} is not in [0, 1]"
            for k in ("drop", "duplicate", "reorder")
            if not 0 <= getattr(self, k) <= 1
        ]
        if wrong:
            raise ValueError(
                "delay proxy: " + ", ".join(wrong) + " (times >= 0 ms, rates in [0, 1])"
            )


class DelayProxy:
    """Forwards upstream -> downstream with Faults. Not thread-safe; run() from one thread,
    stop() from anywhere (a signal handler)."""

    def __init__(
        self,
        upstream: str,
        downstream: str,
        faults: Faults,
        topics: list[str] | None = None,
        ctx: zmq.Context | None = None,
    ):
        self.faults, self.rng = faults, random.Random(faults.seed)
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 100_000)
        for t in topics or [""]:
            self.sub.setsockopt(zmq.SUBSCRIBE, t.encode())
        self.sub.connect(upstream)
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 100_000)
        self.pub.bind(downstream)
        self._held: list = []  # (due ns, order, arrived ns, frames)
        self._order = 0
        self._stop = False
        self._held_ns: list[int] = []
        self.counters = dict.fromkeys(
            ("received", "forwarded", "dropped", "duplicated", "reordered"), 0
        )

    def stop(self) -> None:
        self._stop = True

    def _hold(self, frames: list[bytes], now: int) -> None:
        f, r, c = self.faults, self.rng, self.counters
        c["received"] += 1
        if r.random() < f.drop:
            c["dropped"] += 1
            return
        due = now + int((f.delay_ms + r.uniform(0, f.jitter_ms)) * 1e6)
        if r.random() < f.reorder:
            c["reordered"] += 1
            due += int(f.reorder_ms * 1e6)
        copies = [due]
        if r.random() < f.duplicate:
            c["duplicated"] += 1
            copies.append(due + DUPLICATE_AFTER_NS)
        for d in copies:
            self._order += 1
            heapq.heappush(self._held, (d, self._order, now, frames))

    def run(self, seconds: float | None = None) -> dict:
        """Forward until stop() or `seconds`; returns stats()."""
        end = None if seconds is None else time.monotonic_ns() + int(seconds * 1e9)
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        while not self._stop and (end is None or time.monotonic_ns() < end):
            now = time.monotonic_ns()
            while self._held and self._held[0][0] <= now:
                _, _, arrived, frames = heapq.heappop(self._held)
                try:
                    self.pub.send_multipart(frames, zmq.NOBLOCK)
                    self.counters["forwarded"] += 1
                    if len(self._held_ns) < 100_000:
                        self._held_ns.append(now - arrived)
                except zmq.Again:
                    self.counters["dropped"] += 1
            wait_ms = 100 if not self._held else max(0, (self._held[0][0] - now) // 1_000_000)
            if end is not None:
                wait_ms = min(wait_ms, max(0, (end - now) // 1_000_000))
            if poller.poll(wait_ms):
                for _ in range(1000):  # everything that arrived, stamped as it is taken
                    try:
                        frames = self.sub.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._hold(frames, time.monotonic_ns())
        return self.stats()

    def stats(self) -> dict:
        held = sorted(self._held_ns)
        pct = (
            (lambda q: round(held[min(len(held) - 1, int(q * len(held)))] / 1e6, 3))
            if held
            else (lambda q: None)
        )
        return {
            **self.counters,
            "held_p50_ms": pct(0.5),
            "held_max_ms": round(held[-1] / 1e6, 3) if held else None,
        }

    def close(self) -> None:
        self.sub.close()
        self.pub.close()
        if self._own_ctx:
            self.ctx.term()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="endpoint the sender binds (connect)")
    ap.add_argument("--downstream", required=True, help="endpoint to bind for the receiver")
    ap.add_argument("--topics", nargs="*", default=None, help="topic prefixes (default: all)")
    for name, default in (
        ("delay-ms", 0.0),
        ("jitter-ms", 0.0),
        ("drop", 0.0),
        ("duplicate", 0.0),
        ("reorder", 0.0),
        ("reorder-ms", 100.0),
    ):
        ap.add_argument(f"--{name}", type=float, default=default)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--stats", default=None, help="also write the final counters here")
    a = ap.parse_args(argv)
    try:
        faults = Faults(
            a.delay_ms, a.jitter_ms, a.drop, a.duplicate, a.reorder, a.reorder_ms, a.seed
        )
        proxy = DelayProxy(a.upstream, a.downstream, faults, a.topics)
    except (ValueError, zmq.ZMQError) as e:
        say("delay_proxy", str(e))
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: proxy.stop())
    say("delay_proxy", f"ready ({a.upstream} -> {a.downstream})", error=False)
    try:
        stats = proxy.run(a.seconds)
    finally:
        proxy.close()
    line = json.dumps(stats)
    print(line, flush=True)
    if a.stats:
        with open(a.stats, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
