"""The fleet controller's states, and every transition between them in one table.

    STARTING --(hosts ready: none starting, one up)--> PLACE
    PLACED   --CHANGED--> PLACE       a capacity, a refusal, a key, a host lost, a retry due
    PLACED   --HOST_UP--> BALANCE     a host (re)joined after the first placement
    PLACE    --HOST_UP--> BALANCE
    PLACE    --PLACED---> PLACED      the controller placed the robots and told the hosts
    BALANCE  --PLACED---> PLACED
    BALANCE  --HELD-----> HELD        balance left robots that moved in the last minute
    HELD     --CHANGED--> BALANCE     (or its retry due): balance again, those robots freed
    HELD     --HOST_UP--> BALANCE
    STARTING --REBUILT--> PLACED      a restarted controller found hosts serving
    any      --CHANGED--> itself or PLACE (STARTING stays: the first placement waits)

No clock, no Ray: the controller (rtinfer.fleet.controller) feeds events and asks `placing`.
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    STARTING = "starting"  # no placement yet: it waits for the hosts starting
    PLACED = "placed"  # the table stands: nothing to place
    PLACE = "place"  # something changed: place again
    BALANCE = "balance"  # a host came up after the first placement: place, then balance
    HELD = "held"  # placed; a balance waits for robots that moved lately


class Event(Enum):
    CHANGED = "changed"  # anything placement reads changed (or robots refused: retry due)
    HOST_UP = "host_up"  # a host's node came up
    READY = "ready"  # no host is starting and one is up (the first placement's cue)
    PLACED = "placed"  # a placement was made (the hosts are told next)
    HELD = "held"  # a balance was made that left robots moved lately where they are
    REBUILT = "rebuilt"  # a restarted controller rebuilt its table from the hosts


TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (Phase.STARTING, Event.READY): Phase.PLACE,
    (Phase.STARTING, Event.REBUILT): Phase.PLACED,
    (Phase.PLACED, Event.CHANGED): Phase.PLACE,
    (Phase.PLACED, Event.HOST_UP): Phase.BALANCE,
    (Phase.PLACE, Event.HOST_UP): Phase.BALANCE,
    (Phase.PLACE, Event.PLACED): Phase.PLACED,
    (Phase.BALANCE, Event.PLACED): Phase.PLACED,
    (Phase.BALANCE, Event.HELD): Phase.HELD,
    (Phase.HELD, Event.CHANGED): Phase.BALANCE,
    (Phase.HELD, Event.HOST_UP): Phase.BALANCE,
}


def advance(phase: Phase, event: Event) -> Phase:
    """The phase after `event`; an event the table does not name leaves it as it is."""
    return TRANSITIONS.get((phase, event), phase)


def placing(phase: Phase) -> bool:
    """Whether the robots are placed this turn."""
    return phase in (Phase.PLACE, Phase.BALANCE)
