"""The hosts as the fleet controller knows them: each one's Ray actor, its start and its
polls, its last health and its capacity figures; hosts joining, polled, and lost.

- A host whose Ray resource is in the cluster and which has no actor gets one
  (rtinfer.fleet.host.InferenceHost, detached and named, so it outlives the controller),
  which starts its node.
- Each host up is polled at most every POLL_S: its node's process, its measured capacity
  and the robots its node refused. A poll that fails (the actor's Ray node is gone: Ray's
  health check, ~0.7 s at the settings of `ray_settings`) or a node process that exited is
  a host lost.
- A host's `Seat` (rtinfer.fleet.placement) carries what placement reads: up, its capacity
  (the least of its declared one and its node's measured now), its best of the last
  RECENT_S, the robots its node refused (for REFUSED_FOR_S). Each figure is also noted for
  relief (rtinfer.fleet.relief).

Not thread-safe: the controller calls it under its lock. `step` waits on Ray up to STEP_S.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import ray
from ray.exceptions import RayActorError, RayError

from rtinfer.fleet.host import InferenceHost
from rtinfer.fleet.placement import Seat
from rtinfer.fleet.relief import Relief
from rtinfer.fleet.spec import FleetSpec, host_resource

NAMESPACE = "rtinfer"
STEP_S = 0.05  # the loop's wait for answers from the hosts
POLL_S = 0.2  # how often each host is asked how it is
REFUSED_FOR_S = 30.0  # a robot a host's node refused goes there last for this long
RECENT_S = 10.0  # a host's best measured capacity over this window: placement's fallback


def host_actor_name(host: str) -> str:
    return f"rtinfer-host-{host}"


@dataclass
class Turn:
    """What one `step` found: whether placement must look again, and how many hosts came up."""

    changed: bool = False
    hosts_up: int = 0


class Roster:
    def __init__(self, spec: FleetSpec, relief: Relief, say: Callable[[str], None]) -> None:
        self.spec, self.relief, self.say = spec, relief, say
        self.seats = {
            h.name: Seat(h.name, h.model, False, h.capacity, declared=h.capacity)
            for h in spec.hosts.values()
        }
        self.actors: dict[str, object] = {}  # host -> its InferenceHost actor
        self.starting: dict[object, str] = {}  # start() ref -> host
        self.polls: dict[object, str] = {}  # poll() ref -> host
        self.next_poll: dict[str, float] = {}
        self.health: dict[str, dict] = {}  # host -> its last poll
        self.capacities: dict[str, deque] = {}  # host -> (when, its node's measured capacity)
        self.next_join = 0.0  # when the cluster's resources are looked at next (join)

    def rebuild(self) -> dict[str, str]:
        """After a controller's restart: the hosts' actors that live on; robot -> host for
        the robots each serves."""
        placed = {}
        for name in self.spec.hosts:
            try:
                actor = ray.get_actor(host_actor_name(name), namespace=NAMESPACE)
                state = ray.get(actor.poll.remote(), timeout=10)
            except (ValueError, RayError):
                continue
            if state["up"]:
                self.actors[name] = actor
                self.seats[name].up = True
                self.health[name] = state
                placed.update(dict.fromkeys(state["serving"], name))
        return placed

    def join(self, keys: dict[str, str]) -> None:
        """Hosts whose Ray resource is in the cluster and that have no actor: start one."""
        present = ray.cluster_resources()
        for name in self.spec.hosts:
            if name in self.actors or host_resource(name) not in present:
                continue
            cls = ray.remote(InferenceHost)
            actor = cls.options(
                name=host_actor_name(name),
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_restarts=0,
                resources={host_resource(name): 1},
            ).remote(name, self.spec.to_dict(), keys)
            self.actors[name] = actor
            self.starting[actor.start.remote()] = name
            self.say(f"host {name} joined: starting its node")

    def lost(self, name: str, why: str) -> None:
        self.actors.pop(name, None)
        self.seats[name].up = False
        self.seats[name].capacity = self.seats[name].recent = None
        self.capacities.pop(name, None)
        self.relief.forget(name)
        self.health.pop(name, None)
        self.say(f"host {name} lost ({why}): its robots hold until placed again")
        self.next_join = 0.0  # its Ray node may live on: its node is started again at once
        for ref in [r for r, h in self.polls.items() if h == name]:
            del self.polls[ref]

    def forget(self, name: str) -> None:
        """The actor of a host whose node is gone: killed, so the host can join again."""
        try:
            ray.kill(ray.get_actor(host_actor_name(name), namespace=NAMESPACE))
        except (ValueError, RayError):
            pass

    def step(self, now: float) -> Turn:
        """Ask the hosts due a poll, wait up to STEP_S for the answers (and nodes starting),
        and take what came."""
        turn = Turn()
        for name, actor in self.actors.items():
            if (
                self.seats[name].up
                and name not in self.polls.values()
                and now >= self.next_poll.get(name, 0)
            ):
                self.next_poll[name] = now + POLL_S
                self.polls[actor.poll.remote()] = name
        pending = [*self.starting, *self.polls]
        if not pending:
            time.sleep(STEP_S)
            return turn
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=STEP_S)
        for ref in ready:
            if ref in self.starting:
                self._started(self.starting.pop(ref), ref, turn)
            elif ref in self.polls:
                self._polled(self.polls.pop(ref), ref, turn)
        return turn

    def _started(self, name: str, ref, turn: Turn) -> None:
        turn.changed = True
        try:
            node = ray.get(ref)
        except RayError as e:
            self.lost(name, f"its node did not start: {str(e).splitlines()[-1]}")
            self.forget(name)
            return
        self.seats[name].up = True
        turn.hosts_up += 1
        self.say(f"host {name} up (node pid {node['pid']}){niced(node['niceness'])}")

    def _polled(self, name: str, ref, turn: Turn) -> None:
        try:
            state = ray.get(ref)
        except RayActorError:
            self.lost(name, "its Ray node is gone")
            turn.changed = True
            return
        if not state["up"]:
            self.lost(name, f"its node exited with {state['exit']}")
            self.forget(name)
            turn.changed = True
            return
        turn.changed |= self._note(name, state, time.monotonic())

    def _note(self, name: str, state: dict, now: float) -> bool:
        """A host's poll: its node's capacity (measured now: placement goes by the figure
        the node's admission uses) and its node's refusals; True on a change."""
        seat, declared = self.seats[name], self.spec.hosts[name].capacity
        self.health[name] = state
        changed = False
        for robot in state["refused"]:
            if robot not in seat.refused:  # the node knows its load better than we do
                self.say(f"host {name}'s node refused robot {robot}: placing it elsewhere")
                changed = True
            seat.refused[robot] = now
        for robot in [r for r, t in seat.refused.items() if now - t > REFUSED_FOR_S]:
            del seat.refused[robot]  # its load may have fallen since: it may try again
        caps = [c for c in (declared, state["capacity"]) if c is not None]
        cap = min(caps) if caps else None
        seen = self.capacities.setdefault(name, deque())
        if state["capacity"] is not None:
            seen.append((now, state["capacity"]))
        while seen and now - seen[0][0] > RECENT_S:
            seen.popleft()
        best = [c for c in (declared, max((c for _, c in seen), default=None)) if c is not None]
        recent = min(best) if best else None
        self.relief.note(name, now, cap)
        if (cap, recent) != (seat.capacity, seat.recent):
            seat.capacity, seat.recent = cap, recent
            changed = True
        return changed

    def host_status(self, name: str) -> dict:
        """The part of `status` about one host (the controller adds its robots)."""
        h, host = self.health.get(name, {}), self.spec.hosts[name]
        state = (
            "up"
            if self.seats[name].up
            else "starting"
            if name in self.starting.values()
            else "down"
        )
        return {
            "state": state,
            "model": host.model,
            "actions": host.actions,
            "capacity": self.seats[name].capacity,
            "steady_capacity": self.relief.steady(name),
            "pid": h.get("pid"),
            "cycles": h.get("cycles"),
            "counters": h.get("counters", {}),
        }

    def refused_by_node(self, robot: str, host: str | None) -> bool:
        """Whether the node of `host` (robot's) refused it, as its last poll says."""
        return host is not None and robot in self.health.get(host, {}).get("refused", ())

    def stop_all(self) -> None:
        """Stop every host's node and kill its actor (whether this controller knows it)."""
        for name in self.spec.hosts:
            try:
                actor = ray.get_actor(host_actor_name(name), namespace=NAMESPACE)
                ray.get(actor.stop.remote(), timeout=15)
                ray.kill(actor)
            except (ValueError, RayError):
                pass
        self.actors.clear()


def niced(niceness: int) -> str:
    """What a host's `up` line adds for a node that runs niced (nothing at niceness 0)."""
    if niceness <= 0:
        return ""
    return (
        f", at niceness {niceness}: a busy machine starves it; start the Ray head with "
        "worker_niceness 0 in its --system-config (docs/fleet.md)"
    )
