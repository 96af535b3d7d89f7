"""PyTorch backend: the checkpoint's Policy.step, eager or CUDA graphs (one per (depth, k)).

Loads `<model_dir>/policy.safetensors` + `policy.json` with models.checkpoint (imported
here, lazily: only the torch backend needs the offline model code). Options:
device ("cpu" | "cuda", default "cuda" if available else "cpu"), cuda_graphs (default:
True on CUDA), compile (torch.compile the step, eager mode only), threads (CPU intra-op),
checkpoint (stem inside the model dir, default "policy").
CUDA graphs: static device buffers for tokens, start_pos and the KV; each graph runs the
step and copies kv_out back into the static KV, so replay needs no Python-side tensors.
The graphs share one memory pool, which is safe because logits are copied to pinned host
memory right after each replay.
"""
from __future__ import annotations

import numpy as np

from rtinfer.backends.base import Backend, BackendError


class TorchBackend(Backend):
    name = "torch"

    def _open(self, device: str | None = None, cuda_graphs: bool | None = None,
              compile: bool = False, threads: int | None = None,
              checkpoint: str = "policy") -> None:
        try:
            import torch
            from models.checkpoint import load
        except ImportError as e:
            raise BackendError(f"torch backend needs torch + safetensors ({e}); "
                               "pip install 'rtinfer[train]'") from None
        self.torch = torch
        if threads:
            torch.set_num_threads(int(threads))
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError("device='cuda' but torch sees no CUDA device; use device='cpu'")
        stem = self.model.path / checkpoint
        if not stem.with_suffix(".safetensors").exists():
            raise BackendError(f"{stem}.safetensors is missing; save the policy there with "
                               "models.checkpoint.save (the torch backend needs weights)")
        try:
            self.net = load(stem, device=device).model
        except (ValueError, OSError, KeyError) as e:
            raise BackendError(f"{stem}: cannot load checkpoint ({e})") from None
        self.device = torch.device(device)
        self.cuda_graphs = self.device.type == "cuda" if cuda_graphs is None else cuda_graphs
        if self.cuda_graphs and self.device.type != "cuda":
            raise BackendError("cuda_graphs=True needs device='cuda'")
        self._step = torch.compile(self.net.step, dynamic=False) if compile else self.net.step
        V = int(self.model.config["vocab_size"])
        self.kv = self.net.new_kv(1)
        self._start = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._tok, self._tok_dev, self._logits = {}, {}, {}
        for depth in self.depths:
            for k in self._ks[depth]:
                buf = np.full((1, k), self.pad, np.int64)
                self._tok[(depth, k)] = buf
                self._tok_dev[(depth, k)] = torch.from_numpy(buf).to(self.device)
                host = torch.zeros((1, k, V), dtype=torch.float32,
                                   pin_memory=self.device.type == "cuda")
                self._logits[(depth, k)] = (host, host.numpy())
        self._graphs = {}
        if self.cuda_graphs:
            self._capture()

    def _capture(self) -> None:
        torch = self.torch
        pool = torch.cuda.graph_pool_handle()
        with torch.no_grad():
            for (depth, k), tok in self._tok_dev.items():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # warm-up on a side stream, as torch advises
                    for _ in range(2):
                        self.net.step(tok, self._start, self.kv, depth)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    logits, kv_out = self.net.step(tok, self._start, self.kv, depth)
                    self.kv.copy_(kv_out)
                self._graphs[(depth, k)] = (g, logits)
        self.reset()

    def _tokens(self, depth: int, k: int) -> np.ndarray:
        return self._tok[(depth, k)]

    def _run(self, depth: int, k: int, start_pos: int) -> np.ndarray:
        torch, key = self.torch, (depth, k)
        host, host_np = self._logits[key]
        with torch.no_grad():
            tok = self._tok_dev[key]
            tok.copy_(torch.from_numpy(self._tok[key]))
            self._start.fill_(start_pos)
            if self.cuda_graphs:
                g, logits = self._graphs[key]
                g.replay()
            else:
                logits, self.kv = self._step(tok, self._start, self.kv, depth)
            host.copy_(logits.float())
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()
        return host_np

    def reset(self) -> None:
        self.kv.zero_()

    def snapshot(self, n_pos: int):
        return n_pos, self.kv[..., :n_pos, :].clone()

    def restore(self, snap) -> None:
        n_pos, data = snap
        self.kv[..., :n_pos, :].copy_(data)
