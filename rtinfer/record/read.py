"""Reading a recording back: the robots' per-cycle traces, for `rtinfer report run.mcap`."""

from __future__ import annotations

import os
from collections.abc import Iterator

from rtinfer.record.messages import trace_record

TRACE_CHANNELS = "/rtinfer/trace/"


def read_traces(path: str | os.PathLike) -> Iterator[dict]:
    """The trace records of an MCAP recording (rtinfer.realtime.trace's form), in log order.
    Raises ValueError for a file that is not MCAP (or not a whole one up to its last chunk)."""
    try:
        from mcap.exceptions import McapError
        from mcap_ros2.reader import read_ros2_messages
    except ImportError as e:
        raise ValueError(
            f"reading MCAP needs mcap and mcap-ros2-support ({e}); pip install 'rtinfer[record]'"
        ) from None
    try:
        for msg in read_ros2_messages(os.fspath(path)):
            if msg.channel.topic.startswith(TRACE_CHANNELS):
                yield trace_record(msg.ros_msg)
    except McapError as e:
        raise ValueError(f"not a readable MCAP file ({e})") from None
