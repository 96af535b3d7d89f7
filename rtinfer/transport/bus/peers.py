"""Who sent a message: the CURVE key a Subscriber's message came from (its ``peer``).

Connecting, a message comes from the server of one of the socket's endpoints: its peer is
the Z85 server key that endpoint's CURVE trusts (None: plaintext). A socket that shares
several endpoints tells them apart by the remote address libzmq names on each message
(``Peer-Address``), so `by_peer` groups endpoints into sockets where that address is
enough. Binding with CURVE, ZAP's ``User-Id`` names the client of each message.
"""
from __future__ import annotations

import socket
from typing import Sequence

import zmq

from rtinfer.transport.curve import CurveConfig, load_public


def server_addresses(endpoint: str) -> list[str] | None:
    """The IP addresses libzmq may name as a tcp endpoint's Peer-Address (its host resolved),
    or None for an endpoint that is not tcp."""
    if not endpoint.startswith("tcp://"):
        return None
    host = endpoint[len("tcp://"):].rpartition(";")[2].rpartition(":")[0].strip("[]")
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return [host]


def by_peer(endpoints: Sequence[str], curve, bind: bool
            ) -> list[tuple[list[str], str | None, dict[str, str | None] | None]]:
    """The sockets a Subscriber needs, as (endpoints, peer, by_address): every message of the
    socket comes from ``peer``, or (by_address not None) from by_address[its Peer-Address].

    Connecting, an endpoint's peer is the Z85 server key its CURVE trusts (None: plaintext).
    The session to it is authenticated to that key, and libzmq names its remote address on
    every message, so endpoints share a socket while no address of one is that of another
    with a different peer (robots on hosts of their own: one socket). Two servers on one
    host with different keys get a socket each: zmq_poll costs ~2 us a socket. A binding
    socket is one (ZAP's User-Id names the client of each message).
    """
    if bind or curve is None:
        return [(list(endpoints), None, None)]
    legs: list[tuple[list[str], set, dict]] = []  # (endpoints, peers, address -> peer)
    for ep in endpoints:
        cfg = curve if isinstance(curve, CurveConfig) else curve.get(ep)
        key = None
        if cfg is not None and cfg.server_public_key_file is not None:
            key = load_public(cfg.server_public_key_file).decode()
        addrs = server_addresses(ep)
        for eps, keys, by_addr in legs:
            if addrs is None:  # not tcp: no address names it, it shares only with its peer
                fits = keys == {key} and by_addr is None
            else:
                fits = by_addr is not None and all(by_addr.get(x, key) == key for x in addrs)
            if fits:
                break
        else:
            eps, keys, by_addr = [], set(), (None if addrs is None else {})
            legs.append((eps, keys, by_addr))
        eps.append(ep)
        keys.add(key)
        if addrs is not None:
            by_addr.update(dict.fromkeys(addrs, key))
    return [(eps, next(iter(keys)), None) if len(keys) == 1 else (eps, None, by_addr)
            for eps, keys, by_addr in legs]


def client_of(head: zmq.Frame) -> str | None:
    """The CURVE client that sent this frame (ZAP's User-Id), or None (a NULL session)."""
    try:
        return head.get("User-Id") or None
    except zmq.ZMQError:
        return None


def server_of(head: zmq.Frame, by_address: dict) -> str | None:
    """The peer of the server this frame came from, by its Peer-Address (~0.7 us). An
    address none of our endpoints resolved to (its host's DNS changed since) is named
    ``unknown@ADDRESS``: never None, which would pass for plaintext."""
    try:
        address = head.get("Peer-Address")
    except zmq.ZMQError:
        address = ""
    return by_address[address] if address in by_address else f"unknown@{address}"
