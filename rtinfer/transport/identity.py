"""Identity by key: may a message's declared ``src`` be accepted from the peer CURVE
authenticated it came from (``Subscriber.peer``)?

With CURVE a robot is its key, not the ``src`` it declares. The receiver's allow-list
directory names the keys (``NAME.key`` is NAME's; rtinfer.transport.curve.AllowList, kept
current by the socket that binds with it). A message is accepted when

- it came without CURVE (``peer`` None: an ipc endpoint on one host, or a plaintext one), or
- its peer's key is in the allow-list under the name the message declares as ``src``.

Refused and counted otherwise, with one rate-limited line per kind naming both:

- ``obs_wrong_src``: the key is allowed under another name (a robot speaking for another);
- ``obs_revoked``: the key is not, or no longer, in the allow-list.

Without an allow-list (``allow`` None: the receiver is no CURVE server) there is nothing to
name keys by, and every ``src`` is accepted as declared. ``accept`` costs one dict lookup
(no clock, no allocation) unless it refuses. Not thread-safe: call it from the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rtinfer.transport.curve import AllowList, CurveConfig, allow_list

COUNTERS = ("obs_wrong_src", "obs_revoked")


class Identity:
    """accept(src, peer) for a receiver whose allow-list is ``allow``.

    say: where a refusal is said, ``say(kind, message)`` with a callable message built only
    when a line goes out (rtinfer.realtime.complaints.Complaints.say); None: only counted.
    """

    def __init__(self, allow: AllowList | None, say: Callable | None = None) -> None:
        self.allow = allow
        self._say = say
        self.counters = dict.fromkeys(COUNTERS, 0)

    @classmethod
    def of(
        cls,
        curve: CurveConfig | Mapping[str, CurveConfig | None] | None,
        endpoint: str,
        say: Callable | None = None,
    ) -> Identity:
        """The Identity of the allow-list with which ``endpoint`` is bound (a node's action
        endpoint) in ``curve``, the bus ``curve=`` of the node (curve_configs)."""
        cfg = curve if isinstance(curve, CurveConfig) or curve is None else curve.get(endpoint)
        allowed = None if cfg is None else cfg.allowed_clients_dir
        return cls(None if allowed is None else allow_list(allowed), say)

    def accept(self, src: str, peer: str | None) -> bool:
        """True if a message declaring ``src`` may be taken from ``peer`` (a Z85 key or None)."""
        allow = self.allow
        if peer is None or allow is None:
            return True
        name = allow.names.get(peer)
        if name == src:
            return True
        kind = "obs_revoked" if name is None else "obs_wrong_src"
        self.counters[kind] += 1
        if self._say is not None:
            self._say(kind, lambda: _why(src, peer, name, allow.directory))
        return False


def _why(src: str, peer: str, name: str | None, where: str) -> str:
    """Why a message from ``peer`` (a Z85 key) declaring ``src`` was refused; ``name``: the
    key's name in the allow-list directory ``where`` (None: not in it)."""
    if name is None:
        return (
            f"message declaring src {src!r} refused: its key {peer[:8]}... is not in "
            f"the allow-list {where} (revoked, or never allowed: copy the robot's "
            f".key there to admit it)"
        )
    return (
        f"message declaring src {src!r} refused: it came from the key of {name!r} "
        f"({where}/{name}.key); with CURVE a robot is its key, so its src must be "
        "the name of its key file"
    )
