"""peers: rtinfer against what users would pick instead (LeRobot gRPC, Zenoh, torch eager).

Reproductions of other projects, kept out of the runtime package; needs the `bench` extra.
Sits above rtinfer and models in the layer order: may import both; nothing imports it
(the CLI reaches it by module string).
"""
