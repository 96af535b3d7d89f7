"""Inference backends behind one interface (rtinfer.inference.backends.base.Backend).

    backend = get_backend("onnx").load("models/zoo/conveyor-v1", threads=1)

Each backend module imports its heavy package (onnxruntime, torch, tensorrt) only when a
backend is built, so importing this package stays light.
"""

from __future__ import annotations

import importlib

from rtinfer.inference.backends.base import Backend, BackendError, ModelError

# name -> (module, class); modules are imported on demand
BACKENDS = {
    "onnx": ("rtinfer.inference.backends.onnx", "OnnxBackend"),
    "torch": ("rtinfer.inference.backends.torch_backend", "TorchBackend"),
    "tensorrt": ("rtinfer.inference.backends.tensorrt", "TensorRTBackend"),
}


def get_backend(name: str) -> Backend:
    """A new, unloaded backend; call `.load(model_dir, **opts)` next.
    Unknown name -> BackendError listing the valid names."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()


__all__ = ["BACKENDS", "Backend", "BackendError", "ModelError", "get_backend"]
