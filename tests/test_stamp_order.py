"""Every controller trace record's stamps read in the documented order (docs/wire.md) and
in time, for both policies (issue 15, item 5): a real launch of each (sim, policy and
monitor as processes), its controller.trace read back."""

from __future__ import annotations

import pytest
from cell_run import run_cell

ORDER = ("capture", "obs_recv", "first_token", "publish", "recv", "apply")  # apply: if applied


@pytest.mark.parametrize("launch", ["launch/conveyor_expert.yaml", "launch/conveyor_sorting.yaml"])
def test_trace_stamps_are_in_wire_order_and_in_time(launch):
    trace = run_cell(launch).trace
    assert len(trace) > 50
    for rec in trace:
        st = rec["stamps"]
        names = list(st)
        assert names in (list(ORDER), list(ORDER[:-1])), (launch, rec)
        times = [st[k] for k in names]
        assert times == sorted(times), (launch, {k: st[k] - st["capture"] for k in names})
