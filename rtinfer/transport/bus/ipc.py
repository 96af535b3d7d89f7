"""ipc:// socket files: who owns a path, and removing the file a bind made.

An ipc endpoint is a Unix socket file. libzmq binds by unlinking whatever is at the path
and creating it anew, so a second process would silently cut the first off from its peers
(`refuse_live_ipc` refuses instead); and it leaves the file behind when the socket closes
(`SocketFiles` removes it). Abstract endpoints (``ipc://@name``) have no file.
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
        return self.strerror or super().__str__()


def socket_path(endpoint: str) -> str | None:
    """The file of an ipc endpoint; None for another transport or an abstract one."""
    if not endpoint.startswith(IPC) or endpoint.startswith(IPC + "@"):
        return None
    return endpoint[len(IPC) :]


def refuse_live_ipc(endpoint: str) -> None:
    """Raise EndpointInUse if `endpoint` is ipc:// and a live process listens on its path
    (a stale socket file, left by a process that died, is not in use)."""
    path = socket_path(endpoint)
    if path is None or not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(path)
    except OSError:
        return  # nobody listens: a stale file, which the bind replaces
    finally:
        probe.close()
    raise EndpointInUse(
        errno.EADDRINUSE,
        f"{endpoint} is bound by another live process; give "
        "this run its own endpoint, or stop the other run first",
    )


class SocketFiles:
    """The socket files one socket's binds created, removed by `remove` when it closes.

    A file is known by its inode as of the bind (`note`): one that another process has
    bound since (libzmq made it anew) is not ours and stays. Not thread-safe.
    """

    def __init__(self) -> None:
        self._made: dict[str, tuple[int, int]] = {}  # path -> (st_dev, st_ino)

    def note(self, endpoint: str) -> None:
        """Remember the file of `endpoint` (as LAST_ENDPOINT names it), just bound."""
        path = socket_path(endpoint)
        if path is None:
            return
        try:
            st = os.stat(path)
        except OSError:
            return  # gone already: nothing of ours to remove
        self._made[path] = (st.st_dev, st.st_ino)

    def remove(self) -> None:
        """Unlink each noted file that is still the one this socket bound."""
        for path, made in self._made.items():
            try:
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) == made:
                    os.unlink(path)
            except OSError:
                pass  # removed or replaced meanwhile: not ours any more
        self._made.clear()
