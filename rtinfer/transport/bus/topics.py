"""The topic frame of a bus message, and the size a Subscriber lets libzmq take.

A message is the multipart ``[topic, *wire.encode_frames(...)]``. Subscription is by
topic prefix inside libzmq, so a receiver checks that the topic frame is one of its topics
exactly ("obs" would otherwise match "obs2"). An *addressed* message has the topic frame
``TOPIC NUL ROBOT NUL`` (`addressed_topic`), and its body's ``dest`` is ROBOT (`dest_ok`):
only a body with a ``dest`` field (``action_chunk``) can be addressed.
"""

from __future__ import annotations

# A Subscriber's libzmq limit (ZMQ_MAXMSGSIZE, per frame) is a memory guard well above its
# max_bytes: a message over max_bytes still arrives, and rtinfer drops and counts it with
# the session intact. Only a frame over this hard cap makes libzmq end the session.
HARD_CAP_FACTOR = 4
HARD_CAP_FLOOR_BYTES = 65536


def addressed_topic(topic: str, to: str) -> bytes:
    """The topic frame of a message for one receiver: ``TOPIC NUL TO NUL`` (UTF-8). The
    closing NUL keeps a subscription to "cell-1" from matching "cell-10"."""
    return b"%s\x00%s\x00" % (topic.encode(), to.encode())


def parse_addressed(
    frame: bytes, by_bytes: dict[bytes, str], to: dict[str, str]
) -> tuple[str | None, str | None]:
    """(topic, address) of an addressed topic frame whose topic is in ``by_bytes`` (topic
    bytes -> topic) and whose address is ``to``'s for that topic (any where ``to`` names
    none), else (None, None)."""
    name, sep, rest = frame.partition(b"\x00")
    topic = by_bytes.get(name) if sep and rest[-1:] == b"\x00" else None
    if topic is None:
        return None, None
    try:
        dest = rest[:-1].decode()
    except UnicodeDecodeError:
        return None, None
    want = to.get(topic)
    return (topic, dest) if want is None or want == dest else (None, None)


def dest_ok(body: dict, dest: str | None) -> bool:
    """Whether a message's body fits its address: an addressed message (dest: the name in
    its topic frame) must carry that name as the body's ``dest``, so one whose body has no
    ``dest`` (an ``obs``, a ``command``) or another is rejected; a plain one (None) fits."""
    return dest is None or body.get("dest") == dest


def hard_cap_bytes(max_bytes: int) -> int:
    """libzmq's per-frame limit for a Subscriber of this max_bytes: 4x it, at least 64 KiB."""
    return max(HARD_CAP_FACTOR * max_bytes, HARD_CAP_FLOOR_BYTES)
