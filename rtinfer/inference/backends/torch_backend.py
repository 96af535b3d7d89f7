"""PyTorch backend: the checkpoint's Policy.step, eager or CUDA graphs (one per (depth, k)).

Loads `<model_dir>/policy.safetensors` + `policy.json` with models.checkpoint (imported
here, lazily: only the torch backend needs the offline model code). Options:
device ("cpu" | "cuda", default "cuda" if available else "cpu"), cuda_graphs (default:
True on CUDA), compile (torch.compile the step, eager mode only), threads (CPU intra-op),
checkpoint (stem inside the model dir, default "policy"), dtype ("float32" | "float16" |
"bfloat16", default float32), sparse24 (False: 2:4 block weights through
torch.sparse.to_sparse_semi_structured; needs CUDA, compute capability >= 8.0, fp16/bf16,
and weights already pruned to 2:4 with models.sparsity).
CUDA graphs: static device buffers for tokens, start_pos and the KV; each graph runs the
step, copies kv_out back into the static KV and casts the logits to a static fp32 buffer,
so a replay allocates nothing. A graph that fails to capture (e.g. a sparse kernel that
cannot be captured) leaves that (depth, k) on eager steps, counted in
`counters["graph_fallbacks"]`. The graphs share one memory pool, which is safe because
logits are copied to pinned host memory right after each replay.
"""

from __future__ import annotations

import numpy as np

from rtinfer.inference.backends.base import Backend, BackendError

_DTYPES = ("float32", "float16", "bfloat16")


class TorchBackend(Backend):
    name = "torch"

    def _open(
        self,
        device: str | None = None,
        cuda_graphs: bool | None = None,
        compile: bool = False,
        threads: int | None = None,
        checkpoint: str = "policy",
        dtype: str = "float32",
        sparse24: bool = False,
    ) -> None:
        try:
            import torch

            from models.checkpoint import load
        except ImportError as e:
            raise BackendError(
                f"torch backend needs torch + safetensors ({e}); pip install 'rtinfer[train]'"
            ) from None
        self.torch = torch
        if dtype not in _DTYPES:
            raise BackendError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        if threads:
            torch.set_num_threads(int(threads))
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError("device='cuda' but torch sees no CUDA device; use device='cpu'")
        stem = self.model.path / checkpoint
        if not stem.with_suffix(".safetensors").exists():
            raise BackendError(
                f"{stem}.safetensors is missing; save the policy there with "
                "models.checkpoint.save (the torch backend needs weights)"
            )
        try:
            self.net = load(stem, device=device).model.to(getattr(torch, dtype))
        except (ValueError, OSError, KeyError) as e:
            raise BackendError(f"{stem}: cannot load checkpoint ({e})") from None
        self.device = torch.device(device)
        self.cuda_graphs = self.device.type == "cuda" if cuda_graphs is None else cuda_graphs
        if self.cuda_graphs and self.device.type != "cuda":
            raise BackendError("cuda_graphs=True needs device='cuda'")
        self.counters = {"graph_fallbacks": 0, "sparse_layers": 0}
        if sparse24:
            self._sparsify()
        self._step = torch.compile(self.net.step, dynamic=False) if compile else self.net.step
        V = int(self.model.config["vocab_size"])
        self.kv = self.net.new_kv(1)
        self._start = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._tok, self._tok_np, self._tok_dev, self._logits = {}, {}, {}, {}
        pin = self.device.type == "cuda"
        for depth in self.depths:
            for k in self._ks[depth]:
                host_tok = torch.full((1, k), self.pad, dtype=torch.int64)
                host_tok = host_tok.pin_memory() if pin else host_tok
                self._tok[(depth, k)], self._tok_np[(depth, k)] = host_tok, host_tok.numpy()
                self._tok_dev[(depth, k)] = host_tok.to(self.device)
                host = torch.zeros((1, k, V), dtype=torch.float32, pin_memory=pin)
                self._logits[(depth, k)] = (host, host.numpy())
        self._graphs = {}
        if self.cuda_graphs:
            self._capture()

    def _sparsify(self) -> None:
        """Swap every 2:4 block Linear weight for a SparseSemiStructuredTensor."""
        torch = self.torch
        if self.device.type != "cuda":
            raise BackendError("sparse24=True needs device='cuda' (2:4 kernels are GPU-only)")
        cc = torch.cuda.get_device_capability(self.device)
        if cc < (8, 0):
            raise BackendError(
                f"sparse24 needs compute capability >= 8.0; this GPU is "
                f"sm_{cc[0]}{cc[1]}: use sparse24=False"
            )
        if self.net.wte.weight.dtype not in (torch.float16, torch.bfloat16):
            raise BackendError("sparse24 needs dtype='float16' or 'bfloat16'")
        from torch.sparse import to_sparse_semi_structured

        from models.sparsity import check_24, sparse_targets

        targets = sparse_targets(self.net)
        mods = {fqn: self.net.get_submodule(fqn.rsplit(".", 1)[0]) for fqn in targets}
        bad = [fqn for fqn, m in mods.items() if not check_24(m.weight)]
        if bad:
            raise BackendError(
                f"{len(bad)} block weights are not 2:4 (first: {bad[0]}); fine-"
                "tune under masks with models.sparsity (prepare/fold) first"
            )
        for fqn, m in mods.items():
            try:
                m.weight = torch.nn.Parameter(
                    to_sparse_semi_structured(m.weight.detach()), requires_grad=False
                )
            except (RuntimeError, ValueError) as e:  # shape/dtype limits of the 2:4 kernels
                raise BackendError(
                    f"{fqn}: to_sparse_semi_structured refused it ({e}); use sparse24=False"
                ) from None
        self.counters["sparse_layers"] = len(mods)

    def _capture(self) -> None:
        torch = self.torch
        pool = torch.cuda.graph_pool_handle()
        with torch.no_grad():
            for (depth, k), tok in self._tok_dev.items():
                try:
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
                        logits32 = logits.float()
                    self._graphs[(depth, k)] = (g, logits32)
                except RuntimeError:  # torch raises RuntimeError for capture failures
                    self.counters["graph_fallbacks"] += 1
                    torch.cuda.synchronize()
        self.reset()

    def _tokens(self, depth: int, k: int) -> np.ndarray:
        return self._tok_np[(depth, k)]

    def _run(self, depth: int, k: int, start_pos: int) -> np.ndarray:
        torch, key = self.torch, (depth, k)
        host, host_np = self._logits[key]
        with torch.no_grad():
            tok = self._tok_dev[key]
            tok.copy_(self._tok[key], non_blocking=True)
            self._start.fill_(start_pos)
            graph = self._graphs.get(key)
            if graph is not None:
                graph[0].replay()
                logits = graph[1]
            else:
                logits, self.kv = self._step(tok, self._start, self.kv, depth)
            host.copy_(logits, non_blocking=self.device.type == "cuda")
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
