"""The loop's fixed overheads around a chunk's compute, for the deadline test of the scale bench.

A waypoint meets the deadline when capture -> apply stays under it. Besides the chunk (prefill +
decode), that path holds: the observation's transport to the node, its encoding into tokens,
the last waypoint's transport back, and the wait for the controller's next tick. Each is taken
at p99 and summed (an upper bound: the p99s do not coincide).
- Encoding is measured here: the shipped obs spec over the recorded obs_stream.npz bodies.
- Transport and the tick come from a monitor report when one is given (`rtinfer demo --report`:
  its obs_transport, transport and apply_delay stages, clock offsets included), else from
  rtinfer.bench.transport on ipc (one-way, rtinfer's bus + wire, twice: in and out) plus one
  1 kHz controller period (the most a received waypoint waits to be applied).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rtinfer.model.obs_stream import FILE, load_bodies
from rtinfer.realtime.hist import LatencyHistogram

TICK_MS = 1.0  # the controller's period at 1 kHz
REPORT_STAGES = ("obs_transport", "transport", "apply_delay")


def encode_p99_ms(md, repeats: int = 3) -> float:
    """p99 of ObsTokens.encode over the model's recorded obs bodies (ms)."""
    bodies = load_bodies(md.path / FILE)
    h = LatencyHistogram()
    for _ in range(repeats):
        for body in bodies:
            t0 = time.perf_counter_ns()
            md.obs.encode(body)
            h.record(time.perf_counter_ns() - t0)
    return h.percentiles_us()["p99"] / 1e3


def fixed_overheads(md, report=None, messages: int = 1000) -> dict:
    """{"total_ms", "parts_ms": {...}, "source"}: the p99 overheads of one cycle (ms)."""
    parts = {"obs_encode": encode_p99_ms(md)}
    if report:
        stages = json.loads(Path(report).read_text())["stages_ms"]
        missing = [s for s in REPORT_STAGES if not stages.get(s, {}).get("count")]
        if missing:
            raise ValueError(
                f"{report}: no samples of stages {missing}; give a monitor report "
                "of a run that applied chunks (rtinfer demo --report FILE)"
            )
        parts.update({s: stages[s]["p99"] for s in REPORT_STAGES})
        source = f"monitor report {report} (stage p99s) + obs encoding measured here"
    else:
        from rtinfer.bench.transport import run as transport

        one_way = transport(messages=messages, blocks=1)["ipc"]["rtinfer_p99_us"] / 1e3
        parts.update(obs_transport=one_way, transport=one_way, apply_delay=TICK_MS)
        source = (
            f"rtinfer bench transport ipc p99 ({messages} messages) in and out, one "
            "1 kHz controller tick, obs encoding: all measured here"
        )
    return {"total_ms": sum(parts.values()), "parts_ms": parts, "source": source}
