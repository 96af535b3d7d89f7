"""rtinfer: real-time robotics control-loop middleware.

Subpackages, bottom to top (docs/architecture.md): transport and realtime, model, then
inference, monitor and launch, then bench and cli. transport, realtime and model are the
robot-safe core: numpy, pyzmq, msgpack, pyyaml and hdrhistogram only. Heavy backends
(onnxruntime, torch, tensorrt) are imported by rtinfer.inference, lazily.
"""

__version__ = "0.1.0"
