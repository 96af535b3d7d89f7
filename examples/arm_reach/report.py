"""One line of figures per reach-arm run directory (robot_report.json + monitor_report.json,
as `rtinfer launch launch/arm_reach*.yaml` leaves them), and their totals, as JSON.

    python -m examples.arm_reach.report runs/arm-bc-1 runs/arm-bc-2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def summarise(run_dir) -> dict:
    """The run's task score, time to reach (s), cycles, deadline misses and e2e (ms)."""
    d = Path(run_dir)
    robot = json.loads((d / "robot_report.json").read_text())
    monitor = json.loads((d / "monitor_report.json").read_text())
    task, e2e = robot["task"], monitor["stages_ms"]["e2e"]
    return {
        "run": str(d),
        "sim_s": robot["sim_s"],
        "targets": task["targets"],
        "reached": task["reached"],
        "success_rate": task["success_rate"],
        "reach_s_mean": task["reach_s"].get("mean"),
        "reach_s_p90": task["reach_s"].get("p90"),
        "cycles": monitor["cycles"],
        "deadline_misses": monitor["misses"],
        "rejected_stale": robot["controller"]["rejected_stale"],
        "e2e_ms": {q: e2e[q] for q in ("p50", "p99", "max")},
        "ttft_ms": {q: monitor["stages_ms"]["ttft"][q] for q in ("p50", "p99")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+")
    a = ap.parse_args(argv)
    try:
        rows = [summarise(d) for d in a.run_dirs]
    except (OSError, KeyError, ValueError) as e:
        ap.error(f"not a finished arm_reach run directory: {e}")
    targets, reached = sum(r["targets"] for r in rows), sum(r["reached"] for r in rows)
    print(
        json.dumps(
            {
                "runs": rows,
                "total": {
                    "runs": len(rows),
                    "targets": targets,
                    "reached": reached,
                    "success_rate": reached / targets if targets else None,
                    "deadline_misses": sum(r["deadline_misses"] for r in rows),
                    "cycles": sum(r["cycles"] for r in rows),
                },
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
