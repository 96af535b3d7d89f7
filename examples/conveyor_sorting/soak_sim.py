"""The conveyor cell for `rtinfer soak`: ConveyorSim with every written force checked.

A hardware class for controllers.run (the soak's launch file names it in place of
ConveyorSim). Its report adds "force_check" (writes over the limit, the largest
|force| / limit), the instruction and the observations the publisher dropped.
"""

from __future__ import annotations

from .sim_node import ConveyorSim


class CheckedConveyorSim(ConveyorSim):
    def __init__(self, control, **options):
        super().__init__(control, **options)
        self.limit = [float(x) for x in control.axis("effort_limit")]
        self.over_limit, self.max_ratio = 0, 0.0
        cell_write = self.write

        def write(cmd) -> None:
            ratio = max(abs(f) / lim for f, lim in zip(cmd.value.tolist(), self.limit))
            if ratio > self.max_ratio:
                self.max_ratio = ratio
            if ratio > 1.0 + 1e-9:
                self.over_limit += 1
            cell_write(cmd)

        self.write = write

    def report(self) -> dict:
        return {
            **super().report(),
            "force_check": {"over_limit": self.over_limit, "max_ratio": self.max_ratio},
            "instruction": self.cell.instruction.tolist(),
        }
