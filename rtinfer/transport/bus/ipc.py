"""ipc:// socket files: who owns a path.

An ipc endpoint is a Unix socket file. libzmq binds by unlinking whatever is at the path
and creating it anew, so a second process would silently cut the first off from its peers
(`refuse_live_ipc` refuses instead).
"""
from __future__ import annotations

import errno
import os
import socket

IPC = "ipc://"


class EndpointInUse(OSError):
    """An ipc endpoint another live process has bound. libzmq would take the path over
    silently (it unlinks the socket file and binds anew), cutting the other process off
    from its peers; binding refuses instead."""

    def __str__(self) -> str:
        return self.strerror


def socket_path(endpoint: str) -> str | None:
    """The file of an ipc endpoint; None for another transport or an abstract one."""
    if not endpoint.startswith(IPC) or endpoint.startswith(IPC + "@"):
        return None
    return endpoint[len(IPC):]


def refuse_live_ipc(endpoint: str) -> None:
    """Raise EndpointInUse if `endpoint` is ipc:// and a live process listens on its path
    (a stale socket file, left by a process that died, is not in use)."""
    if not endpoint.startswith(IPC):
        return
    path = endpoint[len(IPC):]
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(path)
    except OSError:
        return  # nobody listens: a stale file, which the bind replaces
    finally:
        probe.close()
    raise EndpointInUse(errno.EADDRINUSE, f"{endpoint} is bound by another live process; give "
                        "this run its own endpoint, or stop the other run first")

