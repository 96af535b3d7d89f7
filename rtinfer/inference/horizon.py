"""What a node under overload asks of a robot: an executed horizon and an observation period.

A robot that takes asks says so in each `obs` (`open_loop_ns`: the longest it executes a
chunk after that observation's capture; docs/wire.md section 5). While the node degrades
for the load (its load level above full quality, or an observation period asked of the
robot: rtinfer.inference.schedule), each chunk for such a robot carries:

- `obs_period_ns`: the period asked (RobotSlot.asked_period_ns), when one is; the robot
  sends no faster.
- `executes` e: the robot executes waypoints 0..e-1 of this chunk before it needs the next;
  the chunk is its plan, and fresh, until waypoint e-1 is due (capture + start_ns + (e-1) *
  period_ns, its **window**), even past the deadline. The rule: the next chunk comes from the
  robot's next observation, one observation period P later (the period asked, else its
  measured interval, else the policy's period), and lands within a deadline of it, so the
  chunk must last P + deadline after its capture: e is the fewest waypoints whose window
  covers that, at most the chunk's length (the policy's horizon, or the shorter chunk a
  level sends) and at most what the robot's `open_loop_ns` allows; none when that window
  would not pass the deadline (it would gain nothing). The node then answers the
  robot's observation until that window rather than the deadline (the schedule drops it only
  past it), which is the executed horizon's gain: a late answer is still applied.

A robot that said nothing, and any robot while the node serves at full quality, gets no
ask: the same bytes as before. Pure: no clock, no socket.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Grant:
    """The ask for one observation's chunk (seq): `executes` waypoints (its window after
    capture, `window_ns`; None and 0: none), the observation period asked (None: none)."""

    seq: int
    executes: int | None
    window_ns: int
    obs_period_ns: int | None

    def fields(self, count: int, start_ns: int, period_ns: int) -> tuple[dict, int]:
        """(the chunk body's ask fields, its window ns) for a chunk of `count` waypoints:
        `executes` within the chunk (a level that sends a shorter chunk shortens it)."""
        out: dict[str, int] = {}
        window = 0
        if self.executes is not None:
            e = min(self.executes, count)
            out["executes"], window = e, start_ns + (e - 1) * period_ns
        if self.obs_period_ns is not None:
            out["obs_period_ns"] = self.obs_period_ns
        return out, window


def grant(
    seq: int,
    open_loop_ns: int | None,
    *,
    degraded: bool,
    asked_period_ns: int | None,
    interval_ns: int | None,
    horizon: int,
    period_ns: int,
    start_ns: int,
    deadline_ns: int,
) -> Grant | None:
    """The ask for observation `seq` of a robot (module doc), or None: the robot takes no
    asks (open_loop_ns None), the node is not degraded, or there is nothing to ask."""
    if open_loop_ns is None or not (degraded or asked_period_ns is not None):
        return None
    next_obs = asked_period_ns or interval_ns or period_ns
    need = next_obs + deadline_ns - start_ns  # from waypoint 0's due to the next landing
    e = min(
        -(-need // period_ns) + 1 if need > 0 else 1,
        horizon,
        (open_loop_ns - start_ns) // period_ns + 1,
    )
    window = start_ns + (e - 1) * period_ns
    if e >= 1 and window > deadline_ns:
        return Grant(seq, e, window, asked_period_ns)
    # not past the deadline: it would gain nothing, the deadline rules as before
    return None if asked_period_ns is None else Grant(seq, None, 0, asked_period_ns)
