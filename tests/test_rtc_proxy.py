"""Real-time chunking through the delay proxy: the node's chunks reach the robot 50..80 ms
late, some duplicated, some overtaken, past a 70 ms deadline. The robot drives on chunks
conditioned on its committed prefix that land after the deadline but within their window,
and never applies one past both (its trace of every applied cycle says so), whatever the
proxy does. Real processes and sockets: the proxy; the node and the robot in this process."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import gantry_control
from test_rtc_node import Gantry

from controllers.node import ControllerConfig, ControllerNode
from controllers.rtc import RtcConfig
from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.realtime.trace import TraceWriter, read_trace
from rtinfer.transport.bus import Publisher, Subscriber

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
DEADLINE_MS = 70


def test_conditioned_chunks_drive_past_the_deadline_and_nothing_stale_is_applied(
    tiny_model_dir, tmp_path
):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "late")}
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.bench.delay_proxy",
            "--upstream",
            eps["act"],
            "--downstream",
            eps["late"],
            "--topics",
            "action_chunk",
            "--delay-ms",
            "50",
            "--jitter-ms",
            "30",
            "--duplicate",
            "0.05",
            "--reorder",
            "0.05",
            "--reorder-ms",
            "20",
            "--seed",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    robot_pub = Publisher(eps["obs"], "arm")
    node = InferenceNode(
        tiny_model_dir,
        eps["obs"],
        eps["act"],
        cfg=InferenceNodeConfig(deadline_ms=float(DEADLINE_MS), auto_budget=False),
    )
    sub = Subscriber(eps["late"], ["action_chunk"])
    tok = TokenizerConfig.load(tiny_model_dir / "tokenizer.json")
    cfg = ControllerConfig(
        control=gantry_control(low=(-1.0, -1.0, 0.0), high=(1.0, 1.0, 1.0)),
        tokenizer=tok,
        deadline_ns=DEADLINE_MS * MS,
        chunk_interval_ns=100 * MS,
        rtc=RtcConfig(),
    )
    trace = TraceWriter(tmp_path / "trace.bin")
    ctl = ControllerNode(Gantry(), cfg, sub, robot_pub, tok.hash, trace=trace)
    try:
        assert "ready" in proxy.stderr.readline()
        end = time.monotonic() + 20
        while time.monotonic() < end and ctl.counters["chunks_conditioned"] < 10:
            ctl.tick()
            node.spin_once(0)
            time.sleep(0.0005)
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.communicate(timeout=20)
        trace.close()
        for s in (node, sub, robot_pub):
            s.close()
    c = ctl.counters
    applied = [r for r in read_trace(tmp_path / "trace.bin") if "apply" in r["stamps"]]
    assert c["chunks_conditioned"] >= 3 and 0 < len(applied) <= c["chunks_accepted"]
    for r in applied:  # nothing stale: within the deadline, or within a conditioned window
        e2e = r["stamps"]["apply"] - r["stamps"]["capture"]
        assert e2e <= DEADLINE_MS * MS or e2e < r["fields"].get("window_ms", 0) * MS
    # the window did the work: conditioned chunks applied past the deadline
    assert any(
        r["stamps"]["apply"] - r["stamps"]["capture"] > DEADLINE_MS * MS
        and "window_ms" in r["fields"]
        for r in applied
    )


def _drive(tiny_model_dir, tmp_path, rtc, delay_ms, jitter_ms, deadline_ms, seconds, until):
    """The robot and the node with the proxy on the chunks' way; the robot's counters and
    its trace's applied cycles."""
    tmp_path.mkdir()
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "late")}
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.bench.delay_proxy",
            "--upstream",
            eps["act"],
            "--downstream",
            eps["late"],
            "--topics",
            "action_chunk",
            "--delay-ms",
            str(delay_ms),
            "--jitter-ms",
            str(jitter_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    robot_pub = Publisher(eps["obs"], "arm")
    node = InferenceNode(
        tiny_model_dir,
        eps["obs"],
        eps["act"],
        cfg=InferenceNodeConfig(deadline_ms=float(deadline_ms), auto_budget=False),
    )
    sub = Subscriber(eps["late"], ["action_chunk"])
    tok = TokenizerConfig.load(tiny_model_dir / "tokenizer.json")
    cfg = ControllerConfig(
        control=gantry_control(low=(-1.0, -1.0, 0.0), high=(1.0, 1.0, 1.0)),
        tokenizer=tok,
        deadline_ns=deadline_ms * MS,
        chunk_interval_ns=150 * MS,
        rtc=rtc,
    )
    trace = TraceWriter(tmp_path / "trace.bin")
    ctl = ControllerNode(Gantry(), cfg, sub, robot_pub, tok.hash, trace=trace)
    try:
        assert "ready" in proxy.stderr.readline()
        end = time.monotonic() + seconds
        while time.monotonic() < end and not until(ctl.counters):
            ctl.tick()
            node.spin_once(0)
            time.sleep(0.0005)
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.communicate(timeout=20)
        trace.close()
        for s in (node, sub, robot_pub):
            s.close()
    return ctl.counters, [r for r in read_trace(tmp_path / "trace.bin") if "apply" in r["stamps"]]


def test_every_answer_later_than_the_deadline_drives_the_robot_with_rtc_and_none_without(
    tiny_model_dir, tmp_path
):
    """Answers 60..80 ms after capture, a 50 ms deadline: without a prefix every chunk is
    stale; with one, the robot starts from rest (its rest prefix: the first chunk, with none
    measured yet, is stale and teaches it the delay) and then follows chunk after chunk."""
    c, applied = _drive(
        tiny_model_dir, tmp_path / "off", None, 60, 20, 50, 3, lambda c: c["rejected_stale"] >= 20
    )
    assert c["chunks_accepted"] == 0 and c["rejected_stale"] >= 5 and applied == []
    c, applied = _drive(
        tiny_model_dir,
        tmp_path / "on",
        RtcConfig(),
        60,
        20,
        50,
        20,
        lambda c: c["chunks_conditioned"] >= 6,
    )
    assert c["chunks_conditioned"] >= 3 and c["prefix_mismatch"] == 0
    for r in applied:
        e2e = r["stamps"]["apply"] - r["stamps"]["capture"]
        assert 50 * MS < e2e < r["fields"]["window_ms"] * MS
