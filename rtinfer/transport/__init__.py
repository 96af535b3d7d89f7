"""rtinfer.transport: the wire format, the ZeroMQ bus and its freshness and security.

wire, arrays and schema define a message; bus moves it (PUB/SUB, bounded, counted);
curve holds CURVE keys and socket security; liveliness is the one freshness check;
heartbeat is the node side of heartbeats; peer_clock is a peer's clock offset, from
heartbeat round trips or messages crossing both ways. Robot-safe: imports numpy, pyzmq, msgpack and
the standard library only, and nothing else of rtinfer.
"""
