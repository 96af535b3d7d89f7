"""ObservationIntake: the inference node's part that takes the robots' observations in.

It owns the obs subscriber (and, robots on other hosts, the trace subscriber: their clocks are
bracketed from obs and traces, rtinfer.inference.node's doc), the identity check (with CURVE
a robot is its key: an obs whose src is not its key's name is refused), and the robots file
(rtinfer.inference.robots_file): when the file changes, the robots it no longer names are let
go and the obs endpoints it names now subscribed. The counters of the subscribers a robots
file replaced live on in `counters()`. Not thread-safe (the node's thread).
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.inference.robots import Robots
from rtinfer.inference.robots_file import RobotsFile
from rtinfer.transport.bus import Subscriber
from rtinfer.transport.heartbeat import same_host
from rtinfer.transport.identity import Identity
from rtinfer.transport.wire import now_ns

DRAIN_LIMIT = 256  # messages one spin takes off a socket: bounds its work under a flood


class ObservationIntake:
    def __init__(
        self,
        obs_eps: list[str],
        identity: Identity,
        *,
        ctx,
        curve,
        say: Callable[..., None],
        robots_file: str | None = None,
        clock: Callable[[], int] = now_ns,
    ):
        """obs_eps: the --obs endpoints (always subscribed). robots_file: its path, or None.
        clock: the node's, for each observation's "recv" stamp."""
        self.obs_sub: Subscriber | None = None
        self.trace_sub: Subscriber | None = None
        self.identity, self.say = identity, say
        self._ctx, self._curve, self._static, self._clock = ctx, curve, obs_eps, clock
        self._eps: list[str] = []
        self._old: dict[str, int] = {}  # of the obs subscribers a robots file replaced
        self.remote = False
        self.robots_file = RobotsFile(robots_file, say) if robots_file else None
        try:  # a socket that fails closes the one before it
            self._subscribe(obs_eps)
        except BaseException:
            self.close()
            raise

    def take(self, timeout_ms: int, offer: Callable) -> None:
        """Everything queued, each accepted observation to offer(env); waits up to timeout_ms
        for the first."""
        sub = self.obs_sub
        env = sub.recv(timeout_ms)
        for _ in range(DRAIN_LIMIT):
            if env is None:
                return
            if self.identity.accept(env.src, sub.peer):
                offer(env)
            env = sub.recv(0)

    def take_traces(self, robots: Robots) -> None:
        """The robots' traces of our waypoint 0s (robots on other hosts): a node -> robot
        message each (its publish on our clock, its recv on the robot's). Others' are
        ignored."""
        sub = self.trace_sub
        if sub is None:
            return
        for _ in range(DRAIN_LIMIT):
            env = sub.recv(0)
            if env is None:
                return
            if self.identity.accept(env.src, sub.peer):
                slot = robots.slots.get(env.src)
                st = env.body["stamps"]
                if slot is not None and "recv" in st and st.get("publish") in slot.sent_ns:
                    slot.clock.to_peer(st["publish"], st["recv"])

    def follow_robots_file(self, now: int, robots: Robots) -> int:
        """The robots file changed: let go of the robots it no longer names (their slots
        freed at once), and subscribe to the obs endpoints it names now. The allow-list is
        read again first, so a key copied in with the file admits its robot at once. The
        number of robots released."""
        if self.robots_file is None:
            return 0
        before = self.robots_file.robots
        named = self.robots_file.changed(now)
        if named is None:
            return 0
        if self.identity.allow is not None:
            self.identity.allow.refresh()
        released = 0
        for name in [n for n in before if n not in named]:
            if robots.slots.pop(name, None) is not None:
                released += 1
            robots.refused.pop(name, None)
        for name in [n for n in named if n not in before]:  # placed here (again): its next
            robots.refused.pop(name, None)  # observation is checked at once
        robots.admission.placed = frozenset(named)  # admitted, degrading (admission doc)
        eps = list(dict.fromkeys([*self._static, *named.values()]))
        if eps != self._eps:
            self._subscribe(eps)
            robots.remote = self.remote
        self.say(
            "robots_file_read",
            f"robots file {self.robots_file.path}: {', '.join(named) or 'no robots'}",
            error=False,
        )
        return released

    def _subscribe(self, obs_eps: list[str]) -> None:
        """The obs (and trace) subscribers, anew on these endpoints. Latest-only per robot,
        not per topic: the robots' slots keep each one's newest."""
        old = (self.obs_sub, self.trace_sub)
        self._eps = obs_eps
        self.remote = not all(same_host(e) for e in obs_eps)
        self.obs_sub = Subscriber(
            obs_eps, ["obs"], ctx=self._ctx, curve=self._curve, say=self.say, clock=self._clock
        )
        self.trace_sub = (
            Subscriber(
                obs_eps,
                ["trace"],
                ctx=self._ctx,
                curve=self._curve,
                say=self.say,
                clock=self._clock,
            )
            if self.remote
            else None
        )
        if old[0] is not None:  # its counters live on in health
            for k, v in (*old[0].counters.items(), ("sessions_ended", old[0].sessions_ended)):
                self._old[k] = self._old.get(k, 0) + v
        for sub in old:
            if sub is not None:
                sub.close()

    def counters(self) -> dict[str, int]:
        """For health: the obs subscribers' refusals and ended sessions, and the identity
        check's counters."""
        sub, old = self.obs_sub, self._old
        return {
            "obs_rejected": sub.counters["rejected"] + old.get("rejected", 0),
            "obs_oversize": sub.counters["oversize"] + old.get("oversize", 0),
            "obs_sessions_ended": sub.sessions_ended + old.get("sessions_ended", 0),
            **self.identity.counters,
        }

    def close(self) -> None:
        for sub in (self.obs_sub, self.trace_sub):
            if sub is not None:
                sub.close()
