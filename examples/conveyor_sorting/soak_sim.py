"""The conveyor sim node for `rtinfer soak`: the stock sim node, every written force checked.

    entry: examples.conveyor_sorting.soak_sim:main    (the soak writes this into its launch file)

The report is the sim node's, plus "force_check" (writes over the limit, the largest
|force| / limit), the instruction and the observations the publisher dropped.
"""
from __future__ import annotations

import json
from pathlib import Path

from .sim_node import make_sim, parse_options, run_sim


class _ForceCheck:
    """A HardwareInterface wrapper that checks every written force against the limit."""

    def __init__(self, hw, force_limit):
        self.hw, self.limit = hw, [float(x) for x in force_limit]
        self.over_limit, self.max_ratio = 0, 0.0

    def read(self):
        return self.hw.read()

    def write(self, cmd) -> None:
        ratio = max(abs(f) / lim for f, lim in zip(cmd.value.tolist(), self.limit))
        if ratio > self.max_ratio:
            self.max_ratio = ratio
        if ratio > 1.0 + 1e-9:
            self.over_limit += 1
        self.hw.write(cmd)


def main(argv: list[str]) -> int:
    """examples.conveyor_sorting.sim_node's command line (the same parser: every option,
    the cell seed included); the SimNode with _ForceCheck."""
    ap, a = parse_options(argv)
    sim = make_sim(ap, a)
    check = _ForceCheck(sim.node.hw, sim.node.cfg.control.axis("effort_limit"))
    sim.node.hw = check
    report = run_sim(sim, a.seconds)
    report["force_check"] = {"over_limit": check.over_limit, "max_ratio": check.max_ratio}
    report["instruction"] = sim.cell.instruction.tolist()
    report["obs_dropped"] = sim.pub.counters.get("dropped")
    if a.report:
        Path(a.report).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
