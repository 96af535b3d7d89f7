"""Latency of a flow model directory on this CPU, per level, the prefix and the steps apart:
rtinfer's FlowRunner (ONNX Runtime, I/O binding, `threads` intra-op threads), the prefix
(`encode`) and the level's K steps (`integrate`) timed separately on the same observation,
levels interleaved round by round so load changes hit every level alike. Beside the wall
times, the calling thread's CPU time (`cpu_p50_ms`): with 1 intra-op thread ONNX Runtime
computes on the caller's thread, so on a host shared with other jobs this is close to what
the same work costs with the core to itself (the wall time is what a robot would see).
"""

from __future__ import annotations

import os
import time

import numpy as np


def _ms(xs) -> dict:
    a = np.asarray(xs) * 1e3
    return {
        "p50_ms": round(float(np.median(a)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
    }


def _p50(xs) -> float:
    return round(float(np.median(xs)) * 1e3, 3)


def bench(model_dir, runs: int = 50, threads: int = 1, warmup: int = 2, feeds=None) -> dict:
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.inference.graph_runner import zero_feeds
    from rtinfer.model.flow_model import FlowModelDir

    model = FlowModelDir.load(model_dir)
    runner = FlowRunner(model, threads=threads)
    feeds = feeds if feeds is not None else zero_feeds(model)
    prefix, steps = [], {lv["level"]: [] for lv in model.levels}
    cpu_prefix, cpu_steps = [], {lv["level"]: [] for lv in model.levels}
    load0 = os.getloadavg()
    for r in range(warmup + runs):
        for lv in model.levels:
            runner.start(seed=(0, r))
            c0, t0 = time.thread_time(), time.perf_counter()
            runner.encode(feeds)
            c1, t1 = time.thread_time(), time.perf_counter()
            runner.integrate(lv["level"])
            c2, t2 = time.thread_time(), time.perf_counter()
            if r >= warmup:
                prefix.append(t1 - t0)
                steps[lv["level"]].append(t2 - t1)
                cpu_prefix.append(c1 - c0)
                cpu_steps[lv["level"]].append(c2 - c1)
    p50_prefix = float(np.median(prefix))
    return {
        "runs": runs,
        "threads": threads,
        "loadavg_1m": [load0[0], os.getloadavg()[0]],
        "cpu": _cpu(),
        "prefix": {**_ms(prefix), "cpu_p50_ms": _p50(cpu_prefix), "runs": len(prefix)},
        "levels": [
            _level(lv, steps[lv["level"]], cpu_steps[lv["level"]], p50_prefix)
            for lv in model.levels
        ],
    }


def _level(lv: dict, wall: list, cpu: list, p50_prefix: float) -> dict:
    p50 = float(np.median(wall))
    return {
        "level": lv["level"],
        "steps": lv["steps"],
        **_ms(wall),
        "cpu_p50_ms": _p50(cpu),
        "runs": len(wall),
        "per_step_p50_ms": round(p50 * 1e3 / lv["steps"], 3),
        "total_p50_ms": round((p50_prefix + p50) * 1e3, 3),
    }


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{os.cpu_count()} cores"
