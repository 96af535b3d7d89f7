"""Row `loop_vs_naive_sleep`: 1 kHz loop lateness, rtinfer's RateKeeper vs `time.sleep`.

Runs in a child process (configure_realtime freezes the GC and locks memory; the driver
must not inherit that). Per block, three loops doing the same PID-sized work
(rtinfer.bench.jitter): RateKeeper under SCHED_FIFO (how rtinfer's launcher runs a
control loop; best effort, the refusal is reported), RateKeeper at the default policy,
and the naive `time.sleep(period)` loop. The stress variant adds one busy process per core,
each with a bounded lifetime and killed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from peers.row import make_row

NAME, PEER = "loop_vs_naive_sleep", "naive time.sleep loop"
_BUSY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def _measure(seconds: float, hz: float, blocks: int) -> dict:
    from rtinfer.bench.jitter import _naive_block, _ratekeeper_block
    from rtinfer.realtime.hist import LatencyHistogram
    from rtinfer.realtime.os_setup import DEFAULT_RT_PRIORITY, configure_realtime

    steps = configure_realtime(cpus=None, priority=None)  # GC freeze + mlockall for all loops
    hists = {k: LatencyHistogram() for k in ("fifo", "plain", "naive")}
    ticks = max(1, int(seconds * hz / blocks))
    fifo = "ok"
    for _ in range(blocks):
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(DEFAULT_RT_PRIORITY))
        except (OSError, AttributeError) as e:
            fifo = f"refused: {e}"
        _ratekeeper_block(hz, ticks, hists["fifo"])
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        _ratekeeper_block(hz, ticks, hists["plain"])
        _naive_block(hz, ticks, hists["naive"])
    return {
        "sched_fifo": fifo,
        "realtime_config": steps,
        "ticks": blocks * ticks,
        **{k: h.percentiles_us() for k, h in hists.items()},
    }


def _child(seconds: float, hz: float, blocks: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "loop.json")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "peers.loop",
                "--seconds",
                str(seconds),
                "--hz",
                str(hz),
                "--blocks",
                str(blocks),
                "--out",
                out,
            ],
            check=True,
            timeout=60 + 4 * seconds,
        )
        with open(out) as f:
            return json.load(f)


def rows(
    seconds: float, hz: float = 1000.0, blocks: int = 3, stress: int | None = None
) -> list[dict]:
    """Two rows: idle host, then `stress` (default: one per core) busy processes."""
    stress = os.cpu_count() or 1 if stress is None else stress
    out = []
    for variant, n_busy in (("idle", 0), (f"stress x{stress}", stress)):
        busy = [
            subprocess.Popen([sys.executable, "-c", _BUSY.format(s=4 * seconds + 30)])
            for _ in range(n_busy)
        ]
        try:
            r = _child(seconds, hz, blocks)
        finally:
            for p in busy:
                p.kill()
                p.wait()
        fifo, plain, naive = r["fifo"], r["plain"], r["naive"]
        row = make_row(
            NAME,
            PEER,
            None,
            [],
            [],
            unit="us lateness",
            variant=variant,
            hz=hz,
            busy_processes=n_busy,
            sched_fifo=r["sched_fifo"],
        )
        row.update(
            rtinfer_p50=fifo["p50"],
            peer_p50=naive["p50"],
            rtinfer_p99=fifo["p99"],
            peer_p99=naive["p99"],
            rtinfer_p999=fifo["p999"],
            peer_p999=naive["p999"],
            rtinfer_max=fifo["max"],
            peer_max=naive["max"],
            ratekeeper_no_fifo_p99=plain["p99"],
            ratekeeper_no_fifo_p999=plain["p999"],
            runs={"rtinfer": int(fifo["count"]), "peer": int(naive["count"])},
        )
        for q in ("p50", "p99", "p999"):  # 1 us floor: sub-us lateness is clock-read noise
            row[f"speedup_{q}"] = round(row[f"peer_{q}"] / max(row[f"rtinfer_{q}"], 1.0), 1)
        out.append(row)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--hz", type=float, default=1000.0)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = _measure(a.seconds, a.hz, a.blocks)
    with open(a.out, "w") as f:
        json.dump(res, f)
