"""rtinfer.inference: the inference node and everything it runs.

node (obs in, streamed waypoints out; node_config its configuration), policy (each kind of
model behind one surface), cycle (one observation's cycle), runner and batch (tokens -> one
chunk, for one robot or several), graph_runner (one-shot graphs), decode (plain and
speculative), prefix_cache, drafters, budget (the compute budget), robots (per-robot state,
admission) and
backends/ (ONNX Runtime, torch, TensorRT and its engine build). May import
rtinfer.transport, rtinfer.realtime and rtinfer.model; onnxruntime, torch and tensorrt are
imported lazily, when a backend is built.
"""
