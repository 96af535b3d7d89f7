"""CommittedIntake: the node's part that takes a robot's committed prefix (real-time chunking).

An `obs` may carry `committed` (rtinfer.transport.committed; docs/wire.md section 5): the
waypoints its robot will execute before this observation's chunk can land, which stand for
the chunk's waypoints 0..n-1. For each observation the node answers, take() says what its
Cycle carries:
- none sent, or a policy that cannot condition (max_committed 0, a one-shot chunk policy:
  said once at start-up; counted committed_ignored): None, and the chunk is unconditioned;
- values not (n, D) of the policy's D, or a first waypoint not due when the chunk's waypoint
  0 is (capture + start_ns, within half a period): counted committed_bad, said, served
  unconditioned (a robot applies that by the plain deadline);
- more waypoints than the policy's max_committed: counted committed_too_long, said with the
  fix, and the observation is not answered (REFUSED), as a checkpoint refuses a delay it
  cannot represent;
- else the Committed, counted committed_taken.
window_ns(body) is how long after capture the chunk of an observation stays fresh when its
prefix is taken: start_ns + n * period_ns, the due time of its first waypoint not committed
(the deadline rules of docs/wire.md). Not thread-safe (the node's thread).
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.transport.committed import Committed

REFUSED = object()  # take(): the observation is not answered
COUNTERS = ("committed_taken", "committed_ignored", "committed_bad", "committed_too_long")


class CommittedIntake:
    def __init__(self, policy, say: Callable[..., None]):
        """policy: its max_committed, period_ns, start_ns and, if it has one, action_dim
        (else the policy checks the values' shape itself). say(kind, text): the node's
        rate-limited lines."""
        self.max_n = int(getattr(policy, "max_committed", 0))
        self.period_ns, self.start_ns = int(policy.period_ns), int(policy.start_ns)
        self.dim = getattr(policy, "action_dim", None)
        self.say = say
        self.counters = dict.fromkeys(COUNTERS, 0)
        if self.max_n == 0:
            say(
                "cannot_condition",
                "this policy cannot condition a chunk on a robot's "
                "committed prefix (max_committed 0: a one-shot chunk policy, or a flow policy "
                "whose step graph takes one t or that declares no max_committed, "
                "docs/policies.md section 2): committed prefixes are ignored, "
                "its chunks are unconditioned, and a robot joins them with its tracker's blend "
                "(blend_ns in the robot's config)",
                error=False,
            )

    def window_ns(self, body: dict) -> int:
        """After capture, how long the chunk of an obs with this body is fresh by its
        committed prefix (0: no prefix this policy takes)."""
        c = body.get("committed")
        return 0 if c is None else self.window_of(len(c["values"]))

    def window_of(self, n: int) -> int:
        """The same for a prefix of n waypoints."""
        return self.start_ns + n * self.period_ns if 0 < n <= self.max_n else 0

    def take(self, env) -> Committed | None | object:
        """The committed prefix env's Cycle carries: a Committed, None, or REFUSED."""
        c = env.body.get("committed")
        if c is None:
            return None
        if self.max_n == 0:
            self.counters["committed_ignored"] += 1
            return None
        values, n, src = c["values"], len(c["values"]), env.src
        if n > self.max_n:
            self.counters["committed_too_long"] += 1
            ms, most = (self.start_ns + n * self.period_ns) / 1e6, self.max_n
            self.say(
                f"committed_too_long.{src}",
                lambda: (
                    f"observation {env.seq} from {src!r} commits {n} waypoints ({ms:.0f} ms after "
                    f"capture), past the {most} this policy can condition on: not answered; lower "
                    f"the robot's committed horizon (its rtc max_ms) or serve a policy that "
                    f"declares a larger max_committed"
                ),
            )
            return REFUSED
        capture = env.stamps.get("capture")
        why = None
        if self.dim is not None and values.shape[1] != self.dim:
            why = f"its values have {values.shape[1]} dimensions, the policy's actions {self.dim}"
        elif capture is None or 2 * abs(c["start_ns"] - capture - self.start_ns) > self.period_ns:
            why = (
                f"its first waypoint is due {(c['start_ns'] - (capture or 0)) / 1e6:.1f} ms "
                f"after capture, not at the chunk's waypoint 0 ({self.start_ns / 1e6:.1f} ms, "
                f"within half a period)"
            )
        if why is not None:
            self.counters["committed_bad"] += 1
            self.say(
                f"committed_bad.{src}",
                lambda: (
                    f"observation {env.seq} from {src!r}: committed prefix not used ({why}); "
                    f"served unconditioned; send the waypoints of the robot's plan due from "
                    f"capture + start_ns on (controllers.rtc)"
                ),
            )
            return None
        self.counters["committed_taken"] += 1
        return Committed.of(c)
