"""Which inference host serves which robot: pure decisions, no Ray, no clock, no socket.

`place` keeps every robot where it is while its host is up and serves its model (a move
costs the robot a hold, so a dip in a host's measured capacity moves nothing: its node's
own admission and overload count guard the robots it serves), then puts each other robot
(new, or its host lost) on the host of its model with the most room left, its own `host`
first when that one has room. A robot that fits nowhere is refused, with why: never placed
on a host that would have to refuse it. A host's room is its capacity: the least of the one
declared in FLEET.yaml and the one its node measures now (health `capacity`, the figure its
admission uses), less the robots placed on it; a host not measured yet (a node just
started, serving nobody) is taken to fit what the least of its model's measured hosts fits.
Where no host has room now, a host that had room at its best of the last seconds (`recent`:
a busy second raises a p99 for a while) is given the robot all the same, and failing that
the host of its model with the most room (the least over) whose declared capacity allows:
its node's own admission decides (it degrades to a cheaper level first, and refuses only a
robot its cheapest level cannot serve, which it admits once its load has fallen). Refused
by placement, a robot waited for a change of capacity or the controller's next retry with
no node looking at it at all: 11.6 s after a node was killed, in the failover bench. So a
robot is refused only where every host of its model is down or at its declared capacity.
A host whose node refused a robot placed there is given that robot again only when no other
host has room (`Seat.refused`), and a robot every host with room refused stays where it is:
its node admits it by itself once its load has fallen (no robot bounces between refusing
hosts). With `balance` (a host has just joined), robots then move from the most loaded host
of a model to the one with the most room while their loads differ by two or more; it stops
at a robot that is `settled` (moved in the last minute) rather than move another in its
place (the controller balances again once that robot's minute is over). Relieving a host that stays
overloaded is rtinfer.fleet.relief's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtinfer.fleet.spec import Robot

UNMEASURED = 1 << 16  # the room of a host with no capacity declared nor measured anywhere


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
    recent: int | None = None  # its capacity at its best of the last seconds (None: capacity)
    declared: int | None = None  # its capacity in FLEET.yaml (None: none declared)


def place(
    robots: dict[str, Robot],
    seats: dict[str, Seat],
    current: dict[str, str],
    balance: bool = False,
    settled: frozenset[str] = frozenset(),
) -> tuple[dict[str, str], dict[str, str]]:
    """(robot -> host for every robot placed, robot -> why for every robot refused).
    settled: robots that moved lately; balance moves none of them."""
    load = {s.name: 0 for s in seats.values() if s.up}
    caps = {s.name: _capacity(s, seats) for s in seats.values()}

    def room(seat: Seat) -> int:
        return caps[seat.name] - load[seat.name] if seat.up else 0

    def fits(robot: Robot, seat: Seat) -> bool:
        return seat.model == robot.model and room(seat) > 0

    def may_take(robot: Robot, seat: Seat) -> bool:
        """seat's node may be asked to serve robot: it is up, of the robot's model, and a
        declared capacity (the operator's) has room; a measured one does not decide (the
        node's admission does: it degrades before it refuses)."""
        return (
            seat.up
            and seat.model == robot.model
            and (seat.declared is None or seat.declared - load[seat.name] > 0)
        )

    def elsewhere(robot: Robot, seat: Seat) -> bool:
        """Another host's node may take it and has not refused it: a robot its node refused
        is served by nobody where it is, so it moves (it waits only where every other host
        refused it, or none is up)."""
        return any(
            may_take(robot, s) and robot.name not in s.refused
            for s in seats.values()
            if s is not seat
        )

    placed, refused = {}, {}
    for name in sorted(current):  # stay where you are (refused there: unless elsewhere)
        seat = seats.get(current[name])
        if (
            name in robots
            and seat is not None
            and seat.up
            and seat.model == robots[name].model
            and (name not in seat.refused or not elsewhere(robots[name], seat))
        ):
            placed[name] = seat.name
            load[seat.name] += 1
    for name in sorted(set(robots) - set(placed)):
        robot = robots[name]
        tiers = (  # room now; room at its recent best; its node decides
            [s for s in seats.values() if fits(robot, s)],
            [
                s
                for s in seats.values()
                if may_take(robot, s) and s.recent is not None and s.recent - load[s.name] > 0
            ],
            [s for s in seats.values() if may_take(robot, s)],
        )
        # a host whose node refused it only when every other refused it too: that node
        # admits it by itself once its load has fallen (it checks a refused robot once a
        # second); any other host's node may take it now
        unrefused = [[s for s in t if name not in s.refused] for t in tiers]
        fit = next((t for t in [*unrefused, *tiers] if t), [])
        if not fit:
            refused[name] = why_refused(robot, seats, load, caps)
            continue
        own = [s for s in fit if s.name == robot.host]
        seat = (
            own[0]
            if own
            else max(fit, key=lambda s: (room(s), s.name == robot.host, [-ord(c) for c in s.name]))
        )
        placed[name] = seat.name
        load[seat.name] += 1
    if balance:
        for _ in range(len(placed)):  # each turn moves one robot, or stops
            if not _move_one(robots, seats, placed, load, room, settled):
                break
    return placed, refused


def _capacity(seat: Seat, seats: dict[str, Seat]) -> int:
    """seat's capacity; unmeasured: the least measured among its model's hosts up."""
    if seat.capacity is not None:
        return seat.capacity
    known = [
        s.capacity
        for s in seats.values()
        if s.up and s.model == seat.model and s.capacity is not None
    ]
    return min(known) if known else UNMEASURED


def _move_one(
    robots: dict[str, Robot],
    seats: dict[str, Seat],
    placed: dict[str, str],
    load: dict[str, int],
    room,
    settled: frozenset[str],
) -> bool:
    """Move one robot from the most loaded host of a model to the one of that model with the
    most room, when their loads differ by two or more; whether one moved."""
    for model in sorted({s.model for s in seats.values() if s.up}):
        up = [s for s in seats.values() if s.up and s.model == model]
        full = max(up, key=lambda s: (load[s.name], s.name))
        for target in sorted(up, key=lambda s: (-room(s), s.name)):
            if target is full or room(target) <= 0 or load[full.name] - load[target.name] < 2:
                continue
            movable = sorted(
                r
                for r, h in placed.items()
                if h == full.name and robots[r].model == model and r not in target.refused
            )
            if movable:
                robot = movable[-1]
                if robot in settled:  # it moved lately: the balance waits for it, rather
                    return False  # than move a robot that has not moved at all
                placed[robot] = target.name
                load[full.name] -= 1
                load[target.name] += 1
                return True
    return False


def why_refused(
    robot: Robot, seats: dict[str, Seat], load: dict[str, int], caps: dict[str, int]
) -> str:
    """One line: why no host takes `robot`, and what would."""
    of_model = [s for s in seats.values() if s.model == robot.model]
    if not of_model:
        return (
            f"robot {robot.name!r} refused: no host serves model {robot.model!r}; add one "
            f"to FLEET.yaml (hosts: NAME: {{model: {robot.model}, actions: ...}})"
        )
    states = ", ".join(
        f"{s.name} down" if not s.up else f"{s.name} full ({load[s.name]}/{caps[s.name]})"
        for s in of_model
    )
    return (
        f"robot {robot.name!r} refused: no host of model {robot.model!r} has room "
        f"({states}); start another host of that model, or raise a capacity"
    )
