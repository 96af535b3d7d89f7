"""The deadline and the slack thresholds: one home for the numbers every role shares.

A cycle's deadline runs from an observation's `capture` to the first setpoint of the chunk
computed from it being applied (docs/wire.md §5). Its slack is deadline - elapsed. Who sheds
compute when the slack runs short (the node's own budget, the monitor's floor, the demo's
launch overrides) uses the same two fractions of the deadline, so they never disagree:
slack below SHED_BELOW -> one budget level cheaper at once; slack above RESTORE_ABOVE for a
while -> one level richer again (the band between them is the hysteresis).
"""

from __future__ import annotations


def deadline_ns(deadline_ms: float) -> int:
    """A deadline given in milliseconds (configs, launch files, the command line) on the
    monotonic clock's nanoseconds: the one conversion every role uses."""
    return int(deadline_ms * 1e6)


DEADLINE_MS = 100.0
DEADLINE_NS = deadline_ns(DEADLINE_MS)

SHED_BELOW = 0.2  # slack under this fraction of the deadline: shed compute now
RESTORE_ABOVE = 0.5  # slack over this fraction, for `patience` cycles: restore a level


def shed_margin_ms(deadline_ms: float) -> float:
    """The slack (ms) under which a cycle sheds compute, for this deadline."""
    return SHED_BELOW * deadline_ms


def restore_margin_ms(deadline_ms: float) -> float:
    """The slack (ms) over which a cycle may restore compute, for this deadline."""
    return RESTORE_ABOVE * deadline_ms
