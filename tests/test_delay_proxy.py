"""The delay proxy as a process between a real Publisher and Subscriber: every message arrives
whole and at least the delay late, drops, duplicates and reorders as asked, and the counters
it prints at SIGTERM add up."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rtinfer.transport.bus import Publisher, Subscriber

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000


def _run(tmp_path, n, *faults, gap_s=0.002):
    """n `obs` messages through a proxy started with `faults`: (the envelopes received, the
    proxy's printed counters)."""
    up, down = f"ipc://{tmp_path}/up", f"ipc://{tmp_path}/down"
    pub = Publisher(up, "robot")
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.bench.delay_proxy",
            "--upstream",
            up,
            "--downstream",
            down,
            "--seed",
            "1",
            *faults,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    sub = Subscriber(down, ["obs"])
    got = []
    try:
        assert "ready" in proxy.stderr.readline()
        for _ in range(300):  # both hops join (PUB/SUB drops what goes before they do)
            pub.publish("obs", {"values": {}, "ints": {"probe": 1}})
            if sub.recv(20) is not None:
                break
        else:
            pytest.fail("nothing came through the proxy")
        time.sleep(0.3)
        while sub.recv(50) is not None:
            pass
        for i in range(n):
            pub.publish("obs", {"values": {"x": np.full(3, i, np.float32)}, "ints": {"i": i}})
            time.sleep(gap_s)
        end = time.monotonic() + 3
        while time.monotonic() < end:
            env = sub.recv(100)
            if env is not None:
                got.append(env)
    finally:
        proxy.send_signal(signal.SIGTERM)
        out, err = proxy.communicate(timeout=20)
        pub.close()
        sub.close()
    assert proxy.returncode == 0, err
    return got, json.loads(out.strip().splitlines()[-1])


def test_every_message_is_held_at_least_the_delay_and_arrives_whole_in_order(tmp_path):
    got, stats = _run(tmp_path, 20, "--delay-ms", "40")
    assert [e.body["ints"]["i"] for e in got] == list(range(20))
    for e in got:
        assert e.stamps["recv"] - e.stamps["publish"] >= 40 * MS
        assert e.body["values"]["x"].tolist() == [float(e.body["ints"]["i"])] * 3
    assert stats["forwarded"] == stats["received"] and stats["dropped"] == 0
    assert stats["held_p50_ms"] >= 40


def test_drops_duplicates_and_reorders_are_counted_and_seen(tmp_path):
    got, stats = _run(
        tmp_path,
        60,
        "--drop",
        "0.2",
        "--duplicate",
        "0.2",
        "--reorder",
        "0.2",
        "--reorder-ms",
        "50",
    )
    order = [e.body["ints"]["i"] for e in got if "i" in e.body["ints"]]  # the probes aside
    assert stats["dropped"] > 0 and stats["duplicated"] > 0 and stats["reordered"] > 0
    assert set(order) <= set(range(60))
    assert len(set(order)) < 60  # some were dropped
    assert len(order) > len(set(order))  # a duplicate arrived twice
    assert order != sorted(order)  # one was overtaken
    assert stats["forwarded"] == stats["received"] - stats["dropped"] + stats["duplicated"]


def test_bad_settings_are_one_line_and_exit_2(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.bench.delay_proxy",
            "--upstream",
            f"ipc://{tmp_path}/u",
            "--downstream",
            f"ipc://{tmp_path}/d",
            "--drop",
            "2",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "delay_proxy: error: delay proxy: drop=2.0 is not in [0, 1] (times >= 0 ms, rates in [0, 1])"
    ]
