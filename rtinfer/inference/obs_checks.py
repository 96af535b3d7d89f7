"""What an observation must be to be answered, and what a robot's stream must not do.

(docs/wire.md section 5, "What a policy node answers"): its capture, moved onto the node's
clock, is neither older than the deadline (its chunk could never be applied in time;
`obs_stale`) nor ahead of the observation's arrival by more than the clock estimate allows
(nothing on one host; across hosts the bracket's width: a stamp from the future makes a
chunk look fresh for longer than it is; `obs_future`), and no later than its own `publish`
stamp (`obs_stamps_disordered`); the same for each camera frame (`frame_stale`,
`frame_future`). Such an observation is refused before it can join, supersede or win the
deadline order, counted, and said once a second per robot. A robot whose observations come
faster than FLOOD_FACTOR times the policy rate is said to flood (`obs_floods`, once a
second): only its newest observation is ever answered, so a flood costs the node the
decoding, never a queue. A seq that goes back is a restarted robot (its publisher is new and
counts from 0): its previous chunk is forgotten and the restart counted; back again within
SEQ_JUMP_WINDOW_NS of the last time it is two processes publishing under one name, not
restarts (`obs_seq_jumps`), said with the fix.

Pure bookkeeping, no clock reads; the counters are the caller's dict; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.inference.robot_slot import RobotSlot
from rtinfer.transport.wire import Envelope

FLOOD_FACTOR = 4  # observations per second over this times the policy rate: a flood
SEQ_JUMP_WINDOW_NS = 5_000_000_000  # a seq back again within this: two publishers, one name
COUNTERS = (
    "obs_stale",
    "obs_future",
    "obs_stamps_disordered",
    "obs_floods",
    "obs_seq_jumps",
    "frame_stale",
    "frame_future",
)


class ObsChecks:
    def __init__(self, counters: dict, say: Callable[..., None]):
        """counters: the dict the checks count into (COUNTERS set to 0 if absent)."""
        for k in COUNTERS:
            counters.setdefault(k, 0)
        self.counters, self.say = counters, say
        self.arrivals: dict[str, list[int]] = {}  # src -> [start of its second, obs in it]

    def bad_stamps(
        self, env: Envelope, slot: RobotSlot | None, remote: bool, now_ns: int, deadline_ns: int
    ) -> bool:
        """Whether env's stamps refuse it (module doc): counted and said; False if fine or
        not yet checkable (another host's clock not bracketed)."""
        st = env.stamps
        capture, recv = st.get("capture"), st.get("recv", now_ns)
        if capture is None:
            return False
        name, kind, why = env.src, None, ""
        if slot is None:  # a robot not yet heard: one host's clock, or not yet bracketed
            bounds = None if remote else (0, 0)
        else:
            bounds = (0, 0) if slot.clock is None else slot.clock.bounds()
        if bounds is not None and bounds[0] <= bounds[1]:  # else: not bracketed yet
            kind, why = too_old_or_new(
                "obs", "its capture", capture, bounds, recv, now_ns, deadline_ns
            )
            for camera, frame in (env.body.get("frames") or {}).items():
                if kind is not None:
                    break
                kind, why = too_old_or_new(
                    "frame",
                    f"the frame capture of its camera {camera!r}",
                    frame["capture_ns"],
                    bounds,
                    recv,
                    now_ns,
                    deadline_ns,
                )
        publish = st.get("publish")
        if kind is None and publish is not None and capture > publish:
            kind, why = (
                "obs_stamps_disordered",
                (
                    f"its capture is {(capture - publish) / 1e6:.1f} ms after its own publish "
                    f"stamp; stamp capture when the sensor reads"
                ),
            )
        if kind is None:
            return False
        self.counters[kind] += 1
        self.say(
            f"{kind}.{name}", lambda: f"observation {env.seq} from {name!r} refused: {why} ({kind})"
        )
        return True

    def restarted(self, slot: RobotSlot, seq: int, now_ns: int) -> None:
        """slot's seq went back to `seq`: a restart, or, again within SEQ_JUMP_WINDOW_NS,
        two processes publishing as one robot (said, with the fix)."""
        slot.counters["restarts"] += 1
        slot.previous = None
        if slot.last_restart_ns is not None and now_ns - slot.last_restart_ns < SEQ_JUMP_WINDOW_NS:
            self.counters["obs_seq_jumps"] += 1
            name, last = slot.name, slot.last_seq
            self.say(
                f"seq_jumps.{name}",
                lambda: (
                    f"robot {name!r}: its observations' seq goes back and forth ({last} -> {seq}):"
                    f" two processes publish as {name!r}; stop the other one, or on ipc make the "
                    f"endpoint's directory private (docs/fleet.md)"
                ),
            )
        slot.last_restart_ns = now_ns

    def count_arrival(self, src: str, now_ns: int, period_ns: int) -> None:
        """One more observation from src (admitted, refused or not) this second; a second
        with over FLOOD_FACTOR times the policy rate is a flood: counted and said."""
        window = self.arrivals.get(src)
        if window is None:
            window = self.arrivals[src] = [now_ns, 0]
        if now_ns - window[0] < 1_000_000_000:
            window[1] += 1
            return
        limit = FLOOD_FACTOR * 1e9 / period_ns
        if window[1] > limit:
            self.counters["obs_floods"] += 1
            n = window[1]
            self.say(
                f"flood.{src}",
                lambda: (
                    f"robot {src!r} sent {n} observations in a second, over {limit:.0f} "
                    f"({FLOOD_FACTOR}x the policy rate): only its newest is answered; publish at "
                    f"the policy rate"
                ),
            )
        window[0], window[1] = now_ns, 1

    def forget(self, now_ns: int, after_ns: int) -> None:
        """Drop the arrival counts of sources silent for after_ns."""
        for n in [n for n, (start, _) in self.arrivals.items() if now_ns - start > after_ns]:
            del self.arrivals[n]


def too_old_or_new(
    what: str, whose: str, capture: int, bounds: tuple, recv: int, now_ns: int, deadline_ns: int
) -> tuple[str | None, str]:
    """(what_future or what_stale, why) for a capture stamp of another clock bracketed by
    `bounds` (offset low, high), or (None, "") when it may be answered."""
    low, high = bounds
    if capture - high > recv:  # in the future even at the largest offset allowed
        return f"{what}_future", (
            f"{whose} is {(capture - high - recv) / 1e6:.1f} ms ahead of its arrival on this "
            f"node's clock (beyond the clock estimate's {(high - low) / 1e6:.3f} ms); fix the "
            f"robot's clock or stamps"
        )
    if now_ns - (capture - low) > deadline_ns:  # older than the deadline for sure
        return f"{what}_stale", (
            f"{whose} is {(now_ns - capture + low) / 1e6:.1f} ms old, past the "
            f"{deadline_ns / 1e6:g} ms deadline: its chunk could never be applied; send the "
            f"newest sample, stamped when it was taken on the robot's monotonic clock, and "
            f"check the robot's clock against this node's"
        )
    return None, ""
