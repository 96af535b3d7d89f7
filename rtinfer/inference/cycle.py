"""Cycle: everything one observation's policy cycle knows, in one object passed along.

The node makes one when an observation is taken (InferenceNode._infer), the runner stamps
first_token_ns before the first waypoint callback, the waypoint publisher stamps
first_publish_ns on waypoint 0 and last_publish_ns on every one, and the accounting reads
them at the end. Nothing about a
cycle lives in the node's or the runner's fields. One small object per cycle; nothing is
allocated per waypoint. Not thread-safe (one cycle, one thread).
"""
from __future__ import annotations

from dataclasses import dataclass

from rtinfer.inference.budget import BudgetLevel


@dataclass(slots=True)
class Cycle:
    seq: int                     # the observation's seq: the chunk's cycle id on the wire
    stamps: dict[str, int]       # carried over from the observation (+ obs_recv), ns
    capture: int | None          # the observation's capture stamp, ns on the robot's clock
    level: BudgetLevel           # the budget level this cycle decodes at
    count: int                   # waypoints in this cycle's chunk
    dest: str = ""               # the robot it answers: the observation's src
    first_token_ns: int = 0      # set by the runner before any waypoint fires
    first_publish_ns: int | None = None  # set when waypoint 0 goes out
    last_publish_ns: int | None = None   # set when each waypoint goes out: the last one's
