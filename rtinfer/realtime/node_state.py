"""State: the one node-state type the inference node and the robot's controller share.

A str (health bodies carry its value, and `state == "run"` holds). The controller uses all
of them; the inference node RUN, HOLD (a safe_hold command) and STOPPED (a stop command,
stop()). `class State(str, Enum)` rather than StrEnum, which needs Python 3.11: str() and
format() give the value, as StrEnum's do.
"""

from __future__ import annotations

from enum import Enum


class State(str, Enum):
    IDLE = "idle"  # no chunk yet
    RUN = "run"  # tracking a chunk (controller); answering (inference node)
    HOLD = "hold"  # braked / not answering; the next fresh chunk (command) resumes
    SAFE_HOLD = "safe_hold"  # held on command until `clear`
    FAULT = "fault"  # a read or write failed; holds until both succeed again
    STOPPED = "stopped"  # the loop ends after this tick / spin

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)
