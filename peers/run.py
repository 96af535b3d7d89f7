"""`rtinfer bench peers`: rtinfer against what users would pick instead, in one run.

Rows (each measured against its peer in the same run, alternated A B A B):
  transport_vs_lerobot_grpc  roundtrip   obs -> action chunk round trip vs LeRobot's gRPC
  transport_vs_zenoh         zenoh_raw       one-way pub/sub vs raw Zenoh
  policy_vs_torch_eager      torch_eager       chunk latency vs torch eager without KV cache
  loop_vs_naive_sleep        loop        1 kHz lateness vs time.sleep, idle and stressed
  spec_vs_theory             decode      accepted tokens per verify vs Leviathan et al.
  decode_vs_bandwidth_floor  decode      bench-size decode step vs weight bytes/bandwidth
A peer that is not installed gives a row with peer_available false and no figures.
`write_markdown` puts the table into docs/benchmarks/peers.md between the peers markers.
"""

from __future__ import annotations

import datetime
import os
import platform
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from peers.row import package_version
from rtinfer.realtime.complaints import say

COMMAND = "rtinfer bench peers --json"
VERSIONS = (
    "rtinfer",
    "numpy",
    "pyzmq",
    "msgpack",
    "onnxruntime",
    "torch",
    "grpcio",
    "protobuf",
    "eclipse-zenoh",
    "lerobot",
)


@dataclass
class Counts:
    """Repetitions per path (defaults: the whole run well under 10 min on 2 cores)."""

    roundtrips: int = 1000  # per variant and path
    messages: int = 2000  # one-way, per payload/transport and path
    blocks: int = 4  # alternation blocks (A B A B ...)
    policy_cycles: int = 100
    loop_seconds: float = 3.0  # per loop kind and variant
    spec_cycles: int = 50
    floor_steps: int = 50

    @classmethod
    def quick(cls) -> Counts:
        """Tiny counts for smoke tests: the code paths, not the figures."""
        return cls(
            roundtrips=20,
            messages=40,
            blocks=2,
            policy_cycles=3,
            loop_seconds=0.2,
            spec_cycles=3,
            floor_steps=3,
        )


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {d: package_version(d) for d in VERSIONS},
    }


def run(
    model_dir=None,
    *,
    counts: Counts | None = None,
    skip_bench_size: bool = False,
    bench_model_dir=None,
    only: list[str] | None = None,
    command: str = COMMAND,
) -> dict:
    """Measure every row (or those named in `only`). model_dir: a policy model directory
    with its checkpoint (None: a random-weight demo model is made in a temp dir).
    bench_model_dir: a bench-size model to reuse (None: made here, ~90 s and ~2 GB, unless
    skip_bench_size). Blocks for minutes; starts and always stops its child processes."""
    from peers import decode, loop, roundtrip, torch_eager, zenoh_raw

    c = counts or Counts()

    def want(name: str) -> bool:
        return only is None or name in only

    result = {"machine": machine(), "command": command, "counts": asdict(c), "rows": []}
    rows = result["rows"]
    with tempfile.TemporaryDirectory() as tmp:
        if want("transport_vs_lerobot_grpc"):
            rows += roundtrip.rows(c.roundtrips, c.blocks, tmp)
        if want("transport_vs_zenoh"):
            rows += zenoh_raw.rows(c.messages, c.blocks, tmp)
        if want("loop_vs_naive_sleep"):
            rows += loop.rows(c.loop_seconds)
        needs_model = want("policy_vs_torch_eager") or want("spec_vs_theory")
        if needs_model and model_dir is None:
            from rtinfer.bench.backend import make_random_model

            model_dir = make_random_model("demo", Path(tmp) / "demo")
            result["model"] = "random-weight demo model (rtinfer.bench.backend.make_random_model)"
        else:
            result["model"] = str(model_dir)
        if want("policy_vs_torch_eager"):
            rows += torch_eager.rows(model_dir, c.policy_cycles)
        if want("spec_vs_theory"):
            rows += decode.spec_rows(model_dir, c.spec_cycles)
        if want("decode_vs_bandwidth_floor"):
            if skip_bench_size:
                from peers.row import unavailable_row

                rows.append(
                    unavailable_row(
                        "decode_vs_bandwidth_floor",
                        "memory-bandwidth floor",
                        "skipped (--skip-bench-size)",
                    )
                )
            else:
                if bench_model_dir is None:
                    from rtinfer.bench.backend import make_random_model

                    bench_model_dir = make_random_model("bench", Path(tmp) / "bench")
                rows += decode.floor_rows(bench_model_dir, c.floor_steps)
    return result


def write_markdown(result: dict, path="docs/benchmarks/peers.md") -> Path:
    """Replace the section between the peers markers in `path` (appended, with the
    markers, if absent; other sections are kept as they are)."""
    from peers.markdown import replace_section, section

    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_section(text, section(result)))
    return path


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench peers`: every peer row in one run; the table goes into
    docs/benchmarks/peers.md."""
    from rtinfer.bench.options import DEFAULT_MODEL, emit, parser

    p = parser("peers", main.__doc__)
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="policy model directory (default: the shipped one, else a random one)",
    )
    p.add_argument("--skip-bench-size", action="store_true", help="no bench-size model row")
    p.add_argument("--bench-model", default=None, help="reuse this bench-size model directory")
    a = p.parse_args(argv)
    shipped_missing = a.model == DEFAULT_MODEL and not Path(a.model).is_dir()
    result = run(
        None if shipped_missing else a.model,
        skip_bench_size=a.skip_bench_size,
        bench_model_dir=a.bench_model,
    )
    say(None, f"table written to {write_markdown(result)}")
    return emit("peers", result, a.json)
