"""The fleet controller: a detached, named Ray actor holding the table of robots, hosts and
their capacity, placing robots and moving them when a host is lost (docs/fleet.md,
"Across hosts").

Its loop (a thread of the actor, every STEP_S):
- the hosts join, are polled and are lost (rtinfer.fleet.roster: their actors, health and
  capacity figures);
- on any change the robots are placed again (rtinfer.fleet.placement) and each host whose
  robots changed is told, hosts losing robots first, so a robot's key is on one host's
  allow-list at a time. A robot refused everywhere is said, one line per robot, and shown
  in `status`. A host that comes up after the first placement takes the robots refused for
  want of room, and robots from the most loaded hosts of its model (placement's balance;
  a robot moved in the last minute is balanced once its minute is over);
- a host whose steady capacity stays below its load is relieved (rtinfer.fleet.relief).
The loop's states and their transitions are rtinfer.fleet.phase's.

A restarted controller (Ray restarts it: max_restarts) rebuilds the table from the host
actors, which keep serving meanwhile: robots keep their node. Ray never carries an
observation or a chunk. Thread-safety: `status` and `down` may be called while the loop
runs (the table is guarded by one lock, which the loop never holds while it waits on a
host's answer to a placement: `status` answers within a step, STEP_S).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rtinfer.fleet.phase import Event, Phase, advance, placing
from rtinfer.fleet.placement import place
from rtinfer.fleet.relief import MOVE_CAUSES, Relief
from rtinfer.fleet.roster import NAMESPACE, Roster, host_actor_name
from rtinfer.fleet.spec import FleetSpec
from rtinfer.realtime.complaints import say

__all__ = [
    "CONTROLLER",
    "NAMESPACE",
    "FleetController",
    "host_actor_name",
    "ray_settings",
    "start_controller",
]
CONTROLLER = "rtinfer-fleet"
JOIN_EVERY_S = 1.0  # how often the cluster's resources are looked at for hosts joining
EVENTS = 200  # the last events `status` shows
RETRY_S = 5.0  # how often robots refused everywhere are placed again


def ray_settings() -> dict:
    """The head node's _system_config a fleet wants: a Ray node lost is known in ~0.7 s
    (Ray's default, 5 health checks 3 s apart, takes ~15 s). A node that joins is first
    checked 5 s after it registered (Ray's default): checked at once, a raylet still
    starting on a busy 2-core machine missed three checks, was marked dead and its `ray
    start` failed (2 of 5 bench repeats at load 2; 1 in 5 still at 2 s). Ray's workers,
    the controller and the hosts' actors with their inference nodes, run at niceness 0:
    Ray's default (15) let three busy loops on a 2-core machine starve every node's start
    past 120 s (8.4 s at niceness 0). `ray start --head --system-config` takes the same
    (docs/fleet.md)."""
    return {
        "health_check_period_ms": 200,
        "health_check_failure_threshold": 3,
        "health_check_timeout_ms": 200,
        "health_check_initial_delay_ms": 5000,
        "worker_niceness": 0,
    }


class FleetController:
    def __init__(self, spec: dict) -> None:
        self.spec = FleetSpec.from_dict(spec)
        self.keys = self._read_keys()
        self.lock = threading.Lock()
        self.relief = Relief()  # the steady capacities, overloaded hosts, robots' last moves
        self.roster = Roster(self.spec, self.relief, self._say)  # the hosts
        self.seats = self.roster.seats
        self.placed: dict[str, str] = {}  # robot -> host
        self.refused: dict[str, str] = {}  # robot -> why
        self.events: deque = deque(maxlen=EVENTS)  # (time.monotonic(), text)
        self.moves = 0
        self._stop = threading.Event()
        self._next_retry = 0.0
        self.phase = Phase.STARTING  # rtinfer.fleet.phase: its states and transitions
        self._rebuild()
        self._thread = threading.Thread(target=self._loop, name="fleet-controller", daemon=True)
        self._thread.start()

    # --- the table ---------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        self.events.append((time.monotonic(), text))
        say("fleet", text, error=False)

    def _read_keys(self) -> dict[str, str]:
        """robot -> its public key's text, for the robots whose ROBOT.key is in the keys
        directory now (with CURVE; {} without): a robot whose key is gone is revoked."""
        if not self.spec.keys:
            return {}
        out = {}
        for r in self.spec.robots:
            try:
                out[r] = (Path(self.spec.keys) / f"{r}.key").read_text()
            except OSError:
                continue
        return out

    def _allowed(self) -> dict:
        """The robots that may be served: every one without CURVE, else those with a key."""
        return {r: b for r, b in self.spec.robots.items() if not self.spec.keys or r in self.keys}

    def _rebuild(self) -> None:
        """After a restart: the hosts' actors that live on, and the robots each serves."""
        self.placed.update(self.roster.rebuild())
        if self.roster.actors:
            self.phase = advance(self.phase, Event.REBUILT)
            self._say(
                f"controller rebuilt its table from {', '.join(sorted(self.roster.actors))}"
                f": {len(self.placed)} robots keep their node"
            )

    def _step(self) -> bool:
        """One turn of the loop; True when the placement must be looked at again."""
        changed = False
        now = time.monotonic()
        if now >= self.roster.next_join:
            self.roster.next_join = now + JOIN_EVERY_S
            self.roster.join(self.keys)
            keys = self._read_keys()
            if keys != self.keys:
                for r in sorted(set(self.keys) - set(keys)):
                    self._say(
                        f"robot {r} revoked (its key is gone from {self.spec.keys}): "
                        f"served by no host from now on"
                    )
                self.keys, changed = keys, True
        turn = self.roster.step(now)
        for _ in range(turn.hosts_up):
            self.phase = advance(self.phase, Event.HOST_UP)
        return changed or turn.changed

    def _relieve(self, now: float) -> dict[str, str]:
        """The robots to move off hosts that stay overloaded (rtinfer.fleet.relief), said."""
        moves = self.relief.moves(now, self._allowed(), self.seats, self.placed)
        for robot, to in moves.items():
            h = self.placed[robot]
            share, steady, load = self.relief.why[h]
            self._say(
                f"host {h} overloaded for {self.relief.window_s:g} s ({share:.0%} of its "
                f"polls below its {load} robots placed; steady capacity {steady}): "
                f"relieving it of robot {robot}, to {to} (steady capacity "
                f"{self.relief.steady(to)})"
            )
        return moves

    def _place(self, relief: dict[str, str]) -> tuple[dict, dict, list[dict]]:
        """Place the robots again, those in `relief` moved first (robot -> host): (placed,
        refused, what each host whose robots changed must be told, in two groups told in
        turn by _tell: the hosts losing robots, then those gaining). The table takes the new
        placement once the hosts were told (_loop), so `status` never shows a robot where
        its host has not been told."""
        now, balance = time.monotonic(), self.phase is Phase.BALANCE
        current, settled = {**self.placed, **relief}, self.relief.settled(now)
        placed, refused = place(self._allowed(), self.seats, current, balance, settled)
        held = (
            balance
            and bool(settled)
            and place(self._allowed(), self.seats, current, balance)[0] != placed
        )
        self.phase = advance(self.phase, Event.HELD if held else Event.PLACED)
        for robot, why in refused.items():
            if robot not in self.refused:  # once (its why's figures change with capacity)
                self._say(why)
        for robot, host in placed.items():
            old = self.placed.get(robot)
            if old != host:
                self.moves += old is not None
                if old is not None:
                    self.relief.moved(robot, now)
                self._say(
                    f"robot {robot}: {old or 'new'} -> {host}{self._why_moved(robot, old, relief)}"
                )
        actors = self.roster.actors
        before = {h: {r for r, x in self.placed.items() if x == h} for h in actors}
        after = {h: {r for r, x in placed.items() if x == h} for h in actors}
        losing = [h for h in actors if before[h] - after[h] and self.seats[h].up]
        gaining = [
            h for h in actors if after[h] != before[h] and h not in losing and self.seats[h].up
        ]
        return (
            placed,
            refused,
            [
                {h: (actors[h], {r: self.keys.get(r) for r in after[h]}) for h in group}
                for group in (losing, gaining)
            ],
        )

    def _why_moved(self, robot: str, old: str | None, relief: dict[str, str]) -> str:
        """Why a placed robot moved, for its event (MOVE_CAUSES): its host lost, its node's
        refusal, a relief or a balance ("" for a first placement)."""
        if old is None:
            return ""
        seat = self.seats.get(old)
        if seat is None or not seat.up:
            return f" ({MOVE_CAUSES[0]})"
        if robot in seat.refused:
            return f" ({MOVE_CAUSES[1]})"
        return f" ({MOVE_CAUSES[2] if robot in relief else MOVE_CAUSES[3]})"

    def _tell(self, groups: list[dict]) -> None:
        """Tell each host its robots, a group at a time: keys out everywhere before keys in
        anywhere. Waits on Ray without the lock, so `status` answers meanwhile; a host that
        does not answer is lost."""
        for group in groups:
            refs = {actor.serve.remote(robots): h for h, (actor, robots) in group.items()}
            for ref, h in refs.items():
                try:
                    ray.get(ref, timeout=10)
                except RayError:  # GetTimeoutError too
                    with self.lock:
                        if self.roster.actors.get(h) is group[h][0]:
                            self.roster.lost(h, "it did not answer a placement")
                            self.phase = advance(self.phase, Event.CHANGED)  # its robots

    def _loop(self) -> None:
        while not self._stop.is_set():
            plan = None
            with self.lock:
                changed = self._step()
                now = time.monotonic()
                if (self.refused or self.phase is Phase.HELD) and now >= self._next_retry:
                    # capacity may have come back; robots held from balance may be freed
                    self._next_retry, changed = now + RETRY_S, True
                relief = {} if self.phase is Phase.STARTING else self._relieve(now)
                if changed or relief:
                    self.phase = advance(self.phase, Event.CHANGED)
                    if not self.roster.starting and any(s.up for s in self.seats.values()):
                        self.phase = advance(self.phase, Event.READY)
                if placing(self.phase):
                    plan = self._place(relief)
            if plan is not None:
                self._tell(plan[2])
                with self.lock:
                    self.placed, self.refused = plan[0], plan[1]

    # --- what callers see ------------------------------------------------------------------------
    def status(self) -> dict:
        """{name, hosts: {host: {state, model, actions, capacity, steady_capacity (relief's
        median of the last seconds; None before a figure), robots, pid, cycles,
        counters (its node's health counters about robots: rtinfer.fleet.host's poll)}},
        robots: {robot: {host, model, state (placed, refused: by every host with room, or
        by the node of its host, which admits it when its load falls; revoked; waiting),
        why}}, moves, events: [[age in s, text], ...] oldest first, monotonic_s: this
        controller's time.monotonic() when it answered (an event happened at monotonic_s -
        age, CLOCK_MONOTONIC: comparable on its machine)}."""
        with self.lock:
            now = time.monotonic()
            hosts = {
                name: {
                    **self.roster.host_status(name),
                    "robots": sorted(r for r, x in self.placed.items() if x == name),
                }
                for name in self.spec.hosts
            }
            allowed = self._allowed()
            robots = {}
            for r, b in self.spec.robots.items():
                host = self.placed.get(r)
                by_node = self.roster.refused_by_node(r, host)
                robots[r] = {
                    "host": host,
                    "model": b.model,
                    "state": "refused"
                    if by_node or r in self.refused
                    else "placed"
                    if host is not None
                    else "revoked"
                    if r not in allowed
                    else "waiting",
                    "why": (
                        f"host {host}'s node refused it (its load): it admits it once its "
                        f"load falls, no other host has room"
                        if by_node
                        else self.refused.get(r)
                    ),
                }
            return {
                "name": self.spec.name,
                "hosts": hosts,
                "robots": robots,
                "moves": self.moves,
                "monotonic_s": now,
                "events": [[round(now - t, 3), text] for t, text in self.events],
            }

    def down(self) -> None:
        """Stop every host's node and actor, then the loop; the caller kills this actor."""
        self._stop.set()
        self._thread.join(timeout=10)
        with self.lock:
            self.roster.stop_all()


def start_controller(spec: FleetSpec):
    """The fleet's controller actor: started on this Ray node (the one `rtinfer fleet up`
    runs on), or the one already running (a second `fleet up` joins it). Ray restarts it
    when it dies; it rebuilds its table from the hosts."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return (
        ray.remote(FleetController)
        .options(
            name=CONTROLLER,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=4,
            max_restarts=-1,
            scheduling_strategy=here,
        )
        .remote(spec.to_dict())
    )
