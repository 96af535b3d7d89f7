"""RestPoint: where a robot at rest holds, the waypoint it commits to with a rest prefix."""

from __future__ import annotations

import numpy as np

from rtinfer.realtime.node_state import State

from .stack import ControlStack

AT_REST = (State.IDLE, State.HOLD)  # the states in which a stopped robot is at rest


class RestPoint:
    def __init__(self, stack: ControlStack, dim: int):
        """dim: the policy's action dimensions (the axes, then the tool if it has one)."""
        self.stack = stack
        self._wp = np.zeros(dim)  # reused

    def at(self, state: State) -> np.ndarray | None:
        """Idle, or holding and stopped: the waypoint it holds (its reference, then the tool
        as commanded; a buffer reused), which it commits to with a rest prefix. None while
        it tracks a chunk, brakes, is held on command, or before its first tick."""
        tr = self.stack.tracker
        if state not in AT_REST or tr.t_ns is None or not tr.braking or tr.vel.any():
            return None
        w, n = self._wp, self.stack.n
        w[:n] = tr.pos
        if len(w) > n:
            w[n] = tr.tool
        return w
