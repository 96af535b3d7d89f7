"""rtinfer: real-time robotics control-loop middleware.

The light core (wire, bus, realtime, tokens, trace) imports only numpy, pyzmq, msgpack and
yaml. Heavy backends (onnxruntime, torch, tensorrt) are imported lazily by the inference side.
"""

__version__ = "0.1.0"
