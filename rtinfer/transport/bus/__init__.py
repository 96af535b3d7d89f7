"""ZeroMQ PUB/SUB bus: bounded, non-blocking publish; validated, counted receive.

A message is the multipart ``[topic, *wire.encode_frames(...)]``. Subscription is by
topic prefix inside libzmq, so the subscriber also checks that the topic frame is one of
its topics exactly and equals the envelope's topic ("obs" would otherwise match "obs2").
An *addressed* message (``publish(..., to=ROBOT)``) has the topic frame
``TOPIC NUL ROBOT NUL`` and a body whose ``dest`` is ROBOT: a Subscriber made with
``to={TOPIC: ROBOT}`` subscribes to that frame only, so libzmq filters the other robots'
messages at the publisher; one without ``to`` takes both forms (addressed_topic).

Endpoints: ``ipc://`` on one host, ``tcp://`` across hosts (use CURVE, see curve.py:
``curve=`` is one CurveConfig for all endpoints or a mapping endpoint -> CurveConfig),
``inproc://`` for tests (both ends must share one zmq.Context: pass ``ctx=``), and
``shm://NAME`` for big arrays between processes of one host: the same messages in iceoryx2
shared memory (shm, shm_intake; the optional extra ``rtinfer[shm]``; docs/wire.md).
Neither class is thread-safe: use each from one thread (zmq sockets are not shareable).

The parts, one concern each: sockets (a socket's life and CURVE per endpoint), heal
(reconnecting after libzmq ends a session), watch (a CURVE server's allow-list), ipc
(socket files), peers (who sent a message), topics (topic frames, size caps), publisher;
subscriber, composed of intake (admitting one message: checks, counters), legs and
shm_intake (its ZeroMQ and shm endpoints, each taking messages off one) and drain
(waiting on the legs, arrival order or the newest per topic).
"""

from rtinfer.transport.bus.heal import HEAL_EVERY_NS, REFUSED_RETRY_NS
from rtinfer.transport.bus.ipc import EndpointInUse, refuse_live_ipc
from rtinfer.transport.bus.publisher import Publisher
from rtinfer.transport.bus.sockets import Curve
from rtinfer.transport.bus.subscriber import Subscriber
from rtinfer.transport.bus.topics import (
    HARD_CAP_FACTOR,
    HARD_CAP_FLOOR_BYTES,
    addressed_topic,
    hard_cap_bytes,
)
from rtinfer.transport.bus.watch import REBIND_WAIT_NS, WATCH_EVERY_NS

__all__ = [
    "Curve",
    "EndpointInUse",
    "HARD_CAP_FACTOR",
    "HARD_CAP_FLOOR_BYTES",
    "HEAL_EVERY_NS",
    "Publisher",
    "REBIND_WAIT_NS",
    "REFUSED_RETRY_NS",
    "Subscriber",
    "WATCH_EVERY_NS",
    "addressed_topic",
    "hard_cap_bytes",
    "refuse_live_ipc",
]
