"""Slow or stuck subscribers: the publisher's memory stays bounded by its HWM, publish never
blocks the loop, and the receiver sees the drops as seq gaps (a PUB socket drops for a full
subscriber in silence). Subscribers are real processes on ipc://.

Never blocking is shown by counts, not by timing, so it holds on a loaded host: the
publisher floods a fixed number of messages, FLOOD, many times what the queues between it
and a subscriber can hold (HWM 1000 at each end plus the socket buffer). A publisher that
waited for a stuck subscriber would stop at that capacity; one that waited for the slow
(~1 kHz) one would lose nothing, so its seq gaps would be 0. Per-publish times are printed,
not asserted (a preempted publish on a busy host takes as long as the preemption; benchmarks
own timing).
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest

from rtinfer.transport.bus import Publisher
from tests.faults.common import LONG, PY, ROOT, stop

HWM = 1000
FLOOD = 400_000 if LONG else 80_000  # messages: 80 x HWM
WAIT_S = 60.0  # for the subscriber's first message: its start-up on a loaded host
SUB = """
import json, signal, sys, time
from rtinfer.transport.bus import Subscriber
sub = Subscriber(sys.argv[1], ["obs"])
mode, seen, gaps, last, fast = sys.argv[2], 0, 0, None, []
signal.signal(signal.SIGUSR1, lambda *_: fast.append(1))  # publisher done: drain what is left
if sub.recv(timeout_ms=int(float(sys.argv[3]) * 1000)) is None:  # subscribed: say so
    sys.exit("no message came")
print("ready", flush=True)
while True:
    if mode == "stuck":
        time.sleep(1)  # connected, never reads
        continue
    env = sub.recv(timeout_ms=100)
    if env is None and fast:
        print(json.dumps({"seen": seen, "gaps": gaps}), flush=True)
        break
    if env is not None:
        if last is not None and env.seq != last + 1:
            gaps += env.seq - last - 1
        seen, last = seen + 1, env.seq
        if not fast:
            time.sleep(0.001)  # a ~1 kHz reader against a far faster publisher
"""


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def body(i: int) -> dict:
    return {
        "values": {
            "objects": np.full((8, 4), i % 7, np.float32),
            "gantry": np.zeros(7, np.float32),
        },
        "ints": {"instruction": 1},
    }


def flood(pub: Publisher, n: int) -> dict:
    """Publish n messages as fast as possible; per-publish durations and RSS before/after (kB)."""
    durations = np.ones(n, np.int64)  # written now: its pages are not RSS growth
    for i in range(2000):  # warm up allocators and the pipe
        pub.publish("obs", body(i))
    rss0, c0 = rss_kb(), dict(pub.counters)
    for i in range(n):
        t = time.perf_counter_ns()
        pub.publish("obs", body(i))
        durations[i] = time.perf_counter_ns() - t
    return {
        "n": n,
        "max_ms": int(durations.max()) / 1e6,
        "p99_us": float(np.percentile(durations, 99)) / 1e3,
        "rss_growth_kb": rss_kb() - rss0,
        **{k: v - c0[k] for k, v in pub.counters.items()},
    }


def subscribed(pub: Publisher, sub: subprocess.Popen) -> None:
    """Publish one message every 10 ms until the subscriber says it heard one (the
    subscription reached the publisher), for at most WAIT_S."""
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end and sub.poll() is None:
        pub.publish("obs", body(0))
        if select.select([sub.stdout], [], [], 0.01)[0]:
            line = sub.stdout.readline().strip()
            assert line == "ready", f"the subscriber said {line!r}, not 'ready'"
            return
    raise AssertionError(
        f"waited {WAIT_S:g} s for the subscriber to hear a first message (exit status {sub.poll()})"
    )


@pytest.mark.parametrize("mode", ["stuck", "slow"])
def test_publisher_stays_bounded_and_non_blocking_with_a_slow_or_stuck_subscriber(mode):
    ep = f"ipc://{tempfile.mkdtemp(prefix='rtf-slow-')}/obs"
    with Publisher(ep, "sim", hwm=HWM) as pub:
        sub = subprocess.Popen(
            [PY, "-c", SUB, ep, mode, str(WAIT_S)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        try:
            subscribed(pub, sub)
            r = flood(pub, FLOOD)
        finally:
            sub.send_signal(signal.SIGUSR1 if mode == "slow" else signal.SIGTERM)
            out = sub.communicate(timeout=WAIT_S)[0]
            stop(sub)
    seen = json.loads(out.splitlines()[-1]) if mode == "slow" else {}
    print(f"{mode}:", json.dumps({**r, **seen}))
    assert r["rss_growth_kb"] < 16 * 1024  # HWM-bounded: no per-message growth
    if mode == "slow":  # the reader lost messages: the publisher did not wait for it
        assert 0 < seen["seen"] < r["n"] and seen["gaps"] > 0, seen
