"""ControlIntake: the inference node's part that hears the monitor and says it is alive.

It owns the control subscriber (`budget`, `command`, `heartbeat`; none without a control
endpoint) and the heartbeat responder. `poll()` echoes the monitor's pings (its clock
offsets) at once and returns what the node acts on: the newest budget level asked for and
the newest command (either None). `beat(now)` sends the node's own heartbeat when due.
Not thread-safe (the node's thread).
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.heartbeat import HeartbeatResponder
from rtinfer.transport.wire import now_ns


class ControlIntake:
    def __init__(
        self,
        endpoint: str | None,
        pub: Publisher,
        name: str,
        health_hz: float,
        *,
        ctx,
        curve,
        say: Callable[..., None],
        clock: Callable[[], int] = now_ns,
    ):
        """clock: the node's; a ping's t1 (its "recv") and its echo's t2 are read from it."""
        self.ctl_sub = (
            Subscriber(
                endpoint,
                ["budget", "command", "heartbeat"],
                ctx=ctx,
                curve=curve,
                say=say,
                clock=clock,
            )
            if endpoint
            else None
        )
        self.heartbeat = HeartbeatResponder(pub, name, period_s=1.0 / health_hz, clock=clock)

    def poll(self) -> tuple[int | None, str | None]:
        """(the budget level the monitor asks for, the command received), each None if none
        arrived; pings are echoed."""
        level = cmd = None
        if self.ctl_sub is None:
            return level, cmd
        for topic, env in self.ctl_sub.poll_latest(0).items():
            if topic == "heartbeat":  # the monitor's ping: echo it (clock offsets)
                self.heartbeat.on_ping(env)
            elif topic == "budget":
                level = env.body["level"]
            else:
                cmd = env.body["cmd"]
        return level, cmd

    def beat(self, now: int) -> None:
        self.heartbeat.beat(now)

    def close(self) -> None:
        if self.ctl_sub is not None:
            self.ctl_sub.close()
