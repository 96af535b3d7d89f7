"""Fault tests run their short variants by default; RTINFER_LONG=1 selects the long ones
(more trials, longer runs). Test modules read the switch from tests.faults.common.LONG."""
