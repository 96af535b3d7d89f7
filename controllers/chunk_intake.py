"""ChunkIntake: the controller's part that takes the policy's waypoints in.

take(env, now, state): check -> assemble. A waypoint of this robot's spec, fresh, and well
formed joins the chunk it belongs to (the ChunkAssembler: the tracker starts on waypoint 0
before the rest arrive); else take() names why not: a rejected_* counter, prefix_mismatch,
LATE (past the deadline) or OTHER_NODE (another node's, while the one followed serves this
robot: counted by OneSource). say(why, ...) says the rejections that mean no chunk from that
policy will ever be followed (LOUD), rate-limited; another robot's chunk only once its policy
has sent only other robots' chunks for DEST_GRACE_NS (a node serving several robots sends
every robot's chunks on one socket). A chunk with an executed horizon (controllers.pace) is
fresh until its window, and the watchdog holds when that passes; a new one taken counts
chunks_executes. Not thread-safe (the loop's thread).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rtinfer.model.action_tokens import ActionTokenizer
from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.node_state import State
from rtinfer.transport.wire import Envelope, WireError

from .assembler import ChunkAssembler
from .controller_config import ControllerConfig
from .one_source import OneSource
from .pace import Pace
from .policy_sources import PolicySources
from .rest_point import RestPoint
from .rtc import REST, Commitments
from .watchdog import Watchdog

LATE = "late"  # take()'s verdict for a waypoint past the deadline (counted rejected_stale)
OTHER_NODE = "other_node"  # take()'s verdict for another node's waypoint (counted already)
HELD = (State.SAFE_HOLD, State.STOPPED, State.FAULT)  # nothing applied
# Rejections that mean no chunk from that policy will ever be followed: one line a second.
LOUD: dict[str, Callable[[ChunkIntake, Envelope, State], str]] = {
    "rejected_hash": lambda self, env, state: (
        f"chunk from {env.src} rejected: its spec {env.body['spec']} is not this robot's ("
        + (
            (
                f"tokenizer {self.tokenizer_hash}"
                if self.tokenizer_hash
                else "no tokenizer: this robot follows continuous chunks only"
            )
            if "tokens" in env.body
            else f"action spec {self.action_hash}"
            if self.action_hash
            else "no action spec: this robot follows action-token chunks only"
        )
        + "); serve a policy packaged for this robot (rtinfer check-model --robot-spec)"
    ),
    "prefix_mismatch": lambda self, env, state: (
        f"chunk {env.body['cycle']} from {env.src} not applied: it was conditioned on waypoints "
        f"{env.body['conditioned']['from']}.. of chunk {env.body['conditioned']['chunk']}, which "
        f"this robot is not executing (it tracks chunk "
        f"{self.chunk.cycle if self.chunk.key else None}, state {state}); chunks that "
        f"arrive out of order do this now and then; if every one does, the node conditions on "
        f"something this robot did not send: run one rtinfer release on both ends"
    ),
    "rejected_dest": lambda self, env, state: (
        f"chunk from {env.src} rejected: it is for robot {env.body['dest']!r}, this is "
        f"{self.robot!r}, and none for this robot came from it for a second; give each robot "
        f"its own name and each policy its own robot (or see the policy's log: a node serving "
        f"several robots says there when it refuses one)"
    ),
}


class ChunkIntake:
    def __init__(
        self,
        cfg: ControllerConfig,
        robot: str,
        *,
        rtc: Commitments,
        watchdog: Watchdog,
        rest: RestPoint,
        clock: Callable[[], int],
        counters: dict[str, int],
        one_source: bool,
    ):
        """robot: the `dest` chunks for this robot carry. counters: the controller's (a
        conditioned chunk taken is counted there, and OneSource's counts)."""
        self.robot: str = robot
        self.cfg, self.rtc, self.watchdog, self.rest = cfg, rtc, watchdog, rest
        self.clock, self.counters = clock, counters
        self.tok = None if cfg.tokenizer is None else ActionTokenizer(cfg.tokenizer)
        # values vs decoded tokens (float32 slack)
        self._tol = 0.0 if self.tok is None else self.tok.bin_width / 2 + 1e-6
        spec = cfg.action if cfg.action is not None else cfg.tokenizer
        assert spec is not None  # ControllerConfig refuses neither
        self.chunk: ChunkAssembler = ChunkAssembler(spec.horizon, len(spec.names))
        self.policies = PolicySources()  # which policies sent chunks for this robot
        # two nodes serving this robot at once (a fleet partition): one node's chunks at a time
        self.source = OneSource(watchdog.quiet_ns, counters) if one_source else None
        self.complaints = Complaints(cfg.name)  # a chunk that can never be followed: say so
        # what a node under overload asks: an executed horizon, an observation period
        self.pace = Pace(
            None if cfg.open_loop_ms is None else int(cfg.open_loop_ms * 1e6), cfg.deadline_ns
        )
        counters.setdefault("chunks_executes", 0)

    @property
    def tokenizer_hash(self) -> str | None:
        return None if self.cfg.tokenizer is None else self.cfg.tokenizer.hash

    @property
    def action_hash(self) -> str | None:
        return None if self.cfg.action is None else self.cfg.action.hash

    def take(self, env: Envelope, now: int, state: State) -> str | None:
        """None: the waypoint joined its chunk; else why not (module doc)."""
        b = env.body
        if (
            self.source is not None
            and b["dest"] == self.robot
            and not self.source.take(env.src, now)
        ):
            return OTHER_NODE
        self.rtc.answered(env.stamps.get("capture"))
        why, wp = self._check(env, now, state)
        if why is None and "conditioned" in b and self._joins(env, state) is False:
            why = "prefix_mismatch"
        if why is None and wp is not None:
            why = self.chunk.add(
                env.src,
                b["cycle"],
                env.stamps["capture"],
                b["index"],
                b["count"],
                b["period_ns"],
                wp,
                env.stamps,
                b["start_ns"],
                self.window_ns(b),
            )
        if why is None:
            if self.chunk.received == 1:
                self._new_chunk(b, env.stamps["capture"])
            self.policies.followed(env.src)
        return why

    def window_ns(self, body: dict) -> int:
        """How long after capture a waypoint with this body is fresh beyond the deadline:
        its committed prefix's window (controllers.rtc) or its executed horizon's
        (controllers.pace), the later; 0: the deadline alone."""
        return max(self.rtc.window_ns(body), self.pace.window_ns(body))

    def _new_chunk(self, b: dict, capture: int) -> None:
        """A new chunk was taken: counted; its asks honoured from now on."""
        if "conditioned" in b:
            self.counters["chunks_conditioned"] += 1
        self.pace.taken(b, capture)
        horizon = self.pace.window_ns(b)
        if horizon:
            self.counters["chunks_executes"] += 1
        self.watchdog.plan_ends(capture + horizon if horizon else None)

    def say(self, why: str, env: Envelope, now: int, state: State) -> None:
        """A rejection that means no chunk from that policy will be followed, said. A policy
        that also serves this robot sends the others' chunks on the same socket (one node,
        several robots): counted, but that is no misconfiguration."""
        if why in LOUD and (why != "rejected_dest" or self.policies.only_others(env.src, now)):
            self.complaints.say(why, lambda: LOUD[why](self, env, state))

    def _joins(self, env: Envelope, state: State) -> bool | None:
        """For a waypoint of a conditioned chunk not yet in use: whether the prefix it names
        is what this robot executes (controllers.rtc); None for the chunk in use, or one
        captured before it (the assembler rejects that as stale)."""
        capture = env.stamps["capture"]
        if (env.src, env.body["cycle"], capture) == self.chunk.key or (
            self.chunk.key is not None and capture < self.chunk.capture_ns
        ):
            return None
        named = env.body["conditioned"]
        return self.rtc.joins(
            self.chunk,
            state == State.RUN,
            named,
            capture,
            self.rest.at(state) if named["chunk"] == REST else None,
        )

    def _check(self, env: Envelope, now: int, state: State) -> tuple[str | None, np.ndarray | None]:
        """(None, the decoded waypoint) if the message may join a chunk, else (the reason
        not to, None): a rejected_* counter, or LATE."""
        b, capture = env.body, env.stamps.get("capture")
        if b["dest"] != self.robot:
            return "rejected_dest", None
        tokens = b.get("tokens")
        if b["spec"] != (self.tokenizer_hash if tokens is not None else self.action_hash):
            return "rejected_hash", None
        # `now` is the tick's start: a message stamped after it and drained later in the tick
        # (a preempted tick on a busy host) is not from the future; the clock read again is
        if capture is None or (
            self.watchdog.from_future(capture, now)
            and self.watchdog.from_future(capture, self.clock())
        ):
            return "rejected_bad", None
        if self.watchdog.stale(capture, now, self.window_ns(b)):
            return LATE, None
        if (
            b["count"] > self.chunk.horizon
            or b["period_ns"] > self.cfg.max_period_ns
            or b["start_ns"] > self.cfg.max_period_ns
        ):
            return "rejected_bad", None
        if tokens is None or self.tok is None:  # a continuous chunk: its values are the truth
            wp = b["values"]
            if wp.shape != (self.chunk.waypoints.shape[1],):
                return "rejected_bad", None
        else:
            try:
                wp = self.tok.decode(tokens)
            except WireError:
                return "rejected_bad", None
            if b["values"].shape != wp.shape or np.any(np.abs(b["values"] - wp) > self._tol):
                return "rejected_bad", None  # tokens are the truth: the values must agree
        if state in HELD:
            return "rejected_hold", None
        return None, wp
