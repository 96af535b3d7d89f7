"""The ZeroMQ I/O thread of a real-time node, one SCHED_FIFO level above the node itself.

Every message goes through its context's I/O thread. A thread started by a SCHED_FIFO
thread inherits its policy and priority, and FIFO never preempts at equal priority: so
while the inference node decodes (FIFO 5) the waypoint it has just published waits on that
CPU for the decode to end, or for the other CPU, where the robot loop (FIFO 10) may be
busy. One level above the caller, the I/O thread preempts its own node for the few
microseconds a send takes, and a waypoint leaves when it is published. Outside
SCHED_FIFO/SCHED_RR nothing changes.

libzmq aborts the whole process if its I/O thread cannot take the priority it was given
(posix_assert on pthread_setschedparam), so the calling thread tries the level first and
the option is set only where the OS granted it.
"""

from __future__ import annotations

import os

import zmq

_RT_POLICIES = tuple(getattr(os, p) for p in ("SCHED_FIFO", "SCHED_RR") if hasattr(os, p))


def io_thread_options() -> list[tuple[int, int]]:
    """Context options (zmq.Context.set) that run its I/O thread one real-time level above
    the calling thread's; [] under normal scheduling or where the level is not permitted."""
    try:
        policy = os.sched_getscheduler(0)
        if policy not in _RT_POLICIES:
            return []
        prio = os.sched_getparam(0).sched_priority
        up = min(prio + 1, os.sched_get_priority_max(policy))
    except (OSError, AttributeError):  # not Linux
        return []
    try:
        os.sched_setscheduler(0, policy, os.sched_param(up))
    except OSError:
        return []  # not permitted: the I/O thread inherits the caller's level
    os.sched_setscheduler(0, policy, os.sched_param(prio))  # lowering is always permitted
    return [(zmq.THREAD_SCHED_POLICY, policy), (zmq.THREAD_PRIORITY, up)]
