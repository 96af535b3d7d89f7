"""Who sent a message: the CURVE key a Subscriber's message came from (its ``peer``).

Connecting, a message comes from the server of the socket's one endpoint (`plan_legs`:
a socket per connected endpoint): its peer is the Z85 server key that endpoint's CURVE
trusts (None: plaintext). Binding with CURVE, ZAP's ``User-Id`` names the client of each
message.
"""

from __future__ import annotations

from collections.abc import Sequence

import zmq

from rtinfer.transport.curve import CurveConfig, load_public


def plan_legs(endpoints: Sequence[str], curve, bind: bool) -> list[tuple[list[str], str | None]]:
    """The sockets a Subscriber needs, as (endpoints, peer): every message of the socket
    comes from ``peer`` (binding: None, ZAP's User-Id names each message's client).

    A binding socket is one. Connecting, each endpoint gets a socket of its own, its peer
    the Z85 server key its CURVE trusts (None: plaintext): libzmq (4.3.5) keeps a pointer to
    each session it connected, and frees a session it ends after a protocol error (a
    handshake the server's allow-list refused, a frame over the hard cap) but not the
    pointer. Disconnecting that endpoint to connect it again (rtinfer.transport.bus.heal)
    then terminates whatever session of the socket now lives at that address: another
    endpoint's, one just admitted, silently, for good (a fleet's robot on three nodes lost
    the stream of the one serving it, refused by the other two). Within a socket of one
    endpoint it can hit nothing else. zmq_poll costs ~2 us a socket.
    """
    if bind:
        return [(list(endpoints), None)]
    out = []
    for ep in endpoints:
        cfg = curve if isinstance(curve, CurveConfig) or curve is None else curve.get(ep)
        key = None
        if cfg is not None and cfg.server_public_key_file is not None:
            key = load_public(cfg.server_public_key_file).decode()
        out.append(([ep], key))
    return out


def client_of(head: zmq.Frame) -> str | None:
    """The CURVE client that sent this frame (ZAP's User-Id), or None (a NULL session)."""
    try:
        return head.get(b"User-Id") or None  # bytes: the stubs then know it is a str
    except zmq.ZMQError:
        return None
