"""WaypointPublisher: the inference node's part that sends a chunk's waypoints to its robot.

The policy calls `publish(cycle, first, values, tokens)` the moment waypoints first.. of a
cycle's chunk are final: one `action_chunk` message each, stamped (the cycle's carried
stamps, first_token, publish on the node's clock), addressed to the cycle's robot where the
node addresses chunks. Values that are not finite drop the chunk from there on (a policy's
NaN must not reach a robot, nor kill the node for all of them): counted chunks_not_finite,
said in one rate-limited line. The first waypoint's publish time is kept in the robot's slot
(its clock offset is bracketed by the robot's trace of it). A robot that takes asks gets,
while the node degrades for the load, the executed horizon and observation period its
observation was granted (rtinfer.inference.horizon) in every waypoint: counted
chunks_asked. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rtinfer.inference.cycle import Cycle
from rtinfer.inference.robots import Robots
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher


class WaypointPublisher:
    def __init__(
        self,
        pub: Publisher,
        policy,
        robots: Robots,
        *,
        address: bool,
        clock: Callable[[], int],
        say: Callable[..., None],
    ):
        """policy: its spec_hash, period_ns and start_ns go on every waypoint."""
        self.pub, self.policy, self.robots = pub, policy, robots
        self.address, self.clock, self.say = address, clock, say
        self.counters = {
            "waypoints": 0,
            "publish_dropped": 0,
            "chunks_not_finite": 0,
            "chunks_asked": 0,
        }

    def publish(self, cycle: Cycle, first: int, values: np.ndarray, tokens) -> None:
        """Waypoints first.. of cycle's chunk (values (n, D), tokens (n, D) or None)."""
        if cycle.dropped or not np.isfinite(values).all():
            if not cycle.dropped:
                cycle.dropped = True
                self.counters["chunks_not_finite"] += 1
                self.say(
                    "chunk_not_finite",
                    lambda: (
                        f"the policy's chunk for observation {cycle.seq} from {cycle.dest} has NaN "
                        f"or inf values: not sent, the robot holds"
                    ),
                )
            return
        to = cycle.dest if self.address else None
        named = (
            cycle.committed.conditioned()
            if cycle.committed is not None and cycle.committed.used
            else None
        )
        p = self.policy
        grant = self.robots.ask(cycle.dest, cycle.seq)
        ask = None if grant is None else grant.fields(cycle.count, p.start_ns, p.period_ns)[0]
        if ask and first == 0:
            self.counters["chunks_asked"] += 1
        for j in range(len(values)):
            st = dict(cycle.stamps)
            st["first_token"] = cycle.first_token_ns
            st["publish"] = cycle.last_publish_ns = self.clock()
            if cycle.first_publish_ns is None:
                cycle.first_publish_ns = st["publish"]
                slot = self.robots.slots.get(cycle.dest)
                if slot is not None:
                    slot.sent_ns.append(st["publish"])
            body = waypoint_body(
                cycle.seq,
                first + j,
                cycle.count,
                values[j],
                spec=p.spec_hash,
                period_ns=p.period_ns,
                start_ns=p.start_ns,
                dest=cycle.dest,
                tokens=None if tokens is None else tokens[j],
                conditioned=named,
                ask=ask,
            )
            if not self.pub.publish("action_chunk", body, st, to=to):
                self.counters["publish_dropped"] += 1
            self.counters["waypoints"] += 1
