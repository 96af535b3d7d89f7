"""The latency stages of one cycle: the one list that the monitor, `rtinfer report` and the
dashboard all compute, from the stamps named in docs/wire.md.

A stage's latency is ``stamps[end] - stamps[start]`` (monotonic ns). Stamps taken on the
policy host are POLICY_STAMPS; every other stamp is taken on the robot host (the trace's
sender). Across hosts the monitor moves both onto its own clock before subtracting.
"""
from __future__ import annotations

# (stage, start stamp, end stamp)
STAGES = (
    ("e2e", "capture", "apply"),
    ("obs_transport", "capture", "obs_recv"),
    ("ttft", "obs_recv", "first_token"),
    ("transport", "publish", "recv"),
    ("apply_delay", "recv", "apply"),
)
POLICY_STAMPS = frozenset({"obs_recv", "first_token", "publish"})
