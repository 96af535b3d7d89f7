"""Cycle: everything one observation's policy cycle knows, in one object passed along.

The node makes one when an observation is taken (InferenceNode._encode) with the robot's
previous chunk in it, the policy stamps first_token_ns before the first waypoint callback
and replaces `previous` with the chunk it decoded (and, for an action-token policy, sets
`stats`), the waypoint publisher stamps first_publish_ns on waypoint 0 and last_publish_ns
on every one (or marks the cycle `dropped`), and the accounting reads them at the end and
hands `previous` back to the robot. `committed` is the robot's committed prefix (real-time
chunking, rtinfer.transport.committed): a policy that conditions its chunk on it marks it
`used`, and then every waypoint names it. Nothing about a cycle lives in the node's or the
policy's fields. One small object per cycle; nothing is allocated per waypoint. Not
thread-safe (one cycle, one thread).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtinfer.inference.budget import BudgetLevel
from rtinfer.transport.committed import Committed


@dataclass(slots=True)
class Cycle:
    seq: int  # the observation's seq: the chunk's cycle id on the wire
    stamps: dict[str, int]  # carried over from the observation (+ obs_recv), ns
    capture: int | None  # the observation's capture stamp, ns on the robot's clock
    level: BudgetLevel  # the budget level this cycle decodes at
    count: int  # waypoints in this cycle's chunk
    dest: str = ""  # the robot it answers: the observation's src
    previous: tuple | None = None  # in: the robot's last chunk (bins (H', D), capture_ns),
    # the chunk-reuse drafts; out: this cycle's (None: none)
    first_token_ns: int = 0  # set by the policy before any waypoint fires
    first_publish_ns: int | None = None  # set when waypoint 0 goes out
    last_publish_ns: int | None = None  # set when each waypoint goes out: the last one's
    stats: object | None = None  # the decode's DecodeStats (an action-token policy)
    dropped: bool = False  # the chunk had a value that is not finite: not sent on
    committed: Committed | None = None  # the robot's committed prefix (None: none, or a
    # policy that cannot condition)

    def record(self, node: str, t_end: int, tokens: int, level: int, skipped: int) -> dict:
        """This cycle's trace record (rtinfer.realtime.trace), answered at t_end with
        `tokens` outputs, at budget level index `level`, `skipped` observations superseded
        so far for its robot."""
        t_recv, t_first, st = self.stamps["obs_recv"], self.first_token_ns, self.stats
        fields = {
            "ttft_us": (t_first - t_recv) / 1e3,
            "per_token_us": (t_end - t_first) / max(tokens - 1, 1) / 1e3,
            "level": float(level),
            "skipped": float(skipped),
        }
        if self.committed is not None and self.committed.used:
            fields["committed"] = float(self.committed.n)
        if st is not None:
            fields["tokens_per_pass"] = st.tokens_per_target_pass
            fields["accepted_per_verify"] = st.accepted / max(st.verifies, 1)
        return {
            "node": node,
            "cycle": self.seq,
            "stamps": {
                **self.stamps,
                "first_token": t_first,
                "last_publish": self.last_publish_ns or t_end,
                "end": t_end,
            },
            "fields": fields,
        }
