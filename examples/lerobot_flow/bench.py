"""Latency of a flow model directory on this CPU, per level, the prefix and the steps apart:
rtinfer's FlowRunner (ONNX Runtime, I/O binding, `threads` intra-op threads), the prefix
(`encode`) and the level's K steps (`integrate`) timed separately on the same observation,
levels interleaved round by round so load changes hit every level alike.
"""
from __future__ import annotations

import os
import time

import numpy as np


def _ms(xs) -> dict:
    a = np.asarray(xs) * 1e3
    return {"p50_ms": round(float(np.median(a)), 3), "p99_ms": round(float(np.percentile(a, 99)), 3)}


def bench(model_dir, runs: int = 50, threads: int = 1, warmup: int = 3, feeds=None) -> dict:
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.inference.graph_runner import zero_feeds
    from rtinfer.model.flow_model import FlowModelDir
    model = FlowModelDir.load(model_dir)
    runner = FlowRunner(model, threads=threads)
    feeds = feeds if feeds is not None else zero_feeds(model)
    prefix, steps = [], {lv["level"]: [] for lv in model.levels}
    load0 = os.getloadavg()
    for r in range(warmup + runs):
        for lv in model.levels:
            runner.start(seed=(0, r))
            t0 = time.perf_counter()
            runner.encode(feeds)
            t1 = time.perf_counter()
            runner.integrate(lv["level"])
            t2 = time.perf_counter()
            if r >= warmup:
                prefix.append(t1 - t0)
                steps[lv["level"]].append(t2 - t1)
    return {"runs": runs, "threads": threads, "loadavg_1m": [load0[0], os.getloadavg()[0]],
            "cpu": _cpu(), "prefix": {**_ms(prefix), "runs": len(prefix)},
            "levels": [{"level": lv["level"], "steps": lv["steps"], **_ms(steps[lv["level"]]),
                        "per_step_p50_ms": round(float(np.median(steps[lv["level"]])) * 1e3
                                                 / lv["steps"], 3),
                        "total_p50_ms": round(float(np.median(prefix) + np.median(
                            steps[lv["level"]])) * 1e3, 3)}
                       for lv in model.levels]}


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{os.cpu_count()} cores"
