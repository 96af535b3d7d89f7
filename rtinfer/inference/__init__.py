"""rtinfer.inference: the inference node and everything it runs.

node (obs in, streamed waypoints out), cycle (one observation's cycle), runner (tokens ->
one chunk), decode (plain and speculative), drafters, budget (the compute budget) and
backends/ (ONNX Runtime, torch, TensorRT and its engine build). May import
rtinfer.transport, rtinfer.realtime and rtinfer.model; onnxruntime, torch and tensorrt are
imported lazily, when a backend is built.
"""
