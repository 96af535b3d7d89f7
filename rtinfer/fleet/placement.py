"""Which inference host serves which robot: pure decisions, no Ray, no clock, no socket.

`place` keeps every robot where it is while its host is up, serves its model and has room
(a move costs the robot a hold, so nothing moves for balance alone), then puts each other
robot (new, or its host lost) on the host of its model with the most room left, its own
`host` first when that one has room. A robot that fits nowhere is refused, with why: never
placed on a host that would have to refuse it. A host's room is its capacity: the least of
the one declared in FLEET.yaml and the one its node measures (health `capacity`, the
admission figure; the controller passes its best of the last seconds), less the robots
placed on it; a host whose node refused a robot placed
there is given that robot again only when no other host has room (`Seat.refused`), and a
robot every host with room refused stays where it is: its node admits it by itself once its
load has fallen (no robot bounces between refusing hosts).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rtinfer.fleet.spec import Robot

UNMEASURED = 1 << 16  # the room of a host with no capacity declared nor measured yet


@dataclass
class Seat:
    """A host as placement sees it. up: its node is serving. capacity: declared or measured
    (None: neither yet). refused: robots its node refused (placed there last; -> when, the
    controller's to age)."""
    name: str
    model: str
    up: bool
    capacity: int | None = None
    refused: dict[str, float] = field(default_factory=dict)


def place(robots: dict[str, Robot], seats: dict[str, Seat], current: dict[str, str]
          ) -> tuple[dict[str, str], dict[str, str]]:
    """(robot -> host for every robot placed, robot -> why for every robot refused)."""
    load = {s.name: 0 for s in seats.values() if s.up}

    def room(seat: Seat) -> int:
        cap = UNMEASURED if seat.capacity is None else seat.capacity
        return cap - load[seat.name] if seat.up else 0

    def fits(robot: Robot, seat: Seat) -> bool:
        return seat.model == robot.model and room(seat) > 0

    def elsewhere(robot: Robot, seat: Seat) -> bool:
        """Another host has room and has not refused it."""
        return any(fits(robot, s) and robot.name not in s.refused
                   for s in seats.values() if s is not seat)

    placed, refused = {}, {}
    for name in sorted(current):  # stay where you are (refused there: unless elsewhere)
        seat = seats.get(current[name])
        if name in robots and seat is not None and fits(robots[name], seat) \
                and (name not in seat.refused or not elsewhere(robots[name], seat)):
            placed[name] = seat.name
            load[seat.name] += 1
    for name in sorted(set(robots) - set(placed)):
        robot = robots[name]
        fit = [s for s in seats.values() if fits(robot, s)]
        if not fit:
            refused[name] = why_refused(robot, seats, load)
            continue
        # a host whose node refused it only when no other has room: that node admits it
        # by itself once its load has fallen (it checks a refused robot once a second)
        fit = [s for s in fit if name not in s.refused] or fit
        own = [s for s in fit if s.name == robot.host]
        seat = own[0] if own else max(fit, key=lambda s: (room(s), s.name == robot.host,
                                                          [-ord(c) for c in s.name]))
        placed[name] = seat.name
        load[seat.name] += 1
    return placed, refused


def why_refused(robot: Robot, seats: dict[str, Seat], load: dict[str, int]) -> str:
    """One line: why no host takes `robot`, and what would."""
    of_model = [s for s in seats.values() if s.model == robot.model]
    if not of_model:
        return (f"robot {robot.name!r} refused: no host serves model {robot.model!r}; add one "
                f"to FLEET.yaml (hosts: NAME: {{model: {robot.model}, actions: ...}})")
    states = ", ".join(
        f"{s.name} down" if not s.up else
        f"{s.name} full ({load[s.name]}/{s.capacity})" for s in of_model)
    return (f"robot {robot.name!r} refused: no host of model {robot.model!r} has room "
            f"({states}); start another host of that model, or raise a capacity")
