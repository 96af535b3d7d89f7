"""Decoder-only transformer policy over [instruction][observation][action] tokens.

nanoGPT-shaped: pre-LayerNorm blocks, causal attention, GELU MLP, learned positions.
Early exits (LayerSkip) reuse the shared final norm + LM head after `cfg.exits` blocks.

Two entry points share the same weights and maths:
- `forward` / `forward_all_exits`: training, whole sequence from position 0, no cache.
- `step`: deployment, static shapes. The KV cache is one preallocated tensor of shape
  `cfg.kv_shape(B)` = (n_layer, 2, B, n_head, max_ctx, head_dim); a step writes
  positions [start_pos, start_pos + k) of the layers it runs and returns the new cache.
  Attention always spans the whole max_ctx buffer with a mask built from positions, so
  an exported graph has fixed shapes for a fixed k.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.config import PolicyConfig


class LayerNorm(nn.LayerNorm):
    """LayerNorm computed in fp32 whatever the weight dtype (fp16 engines overflow otherwise);
    the casts are explicit in the exported graph, as strongly typed TensorRT builds need."""

    def forward(self, x):
        b = None if self.bias is None else self.bias.float()
        y = F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), b, self.eps)
        return y.to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def _qkv(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        return [t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v)]

    def _out(self, y):
        B, _, T, _ = y.shape
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, -1)))

    def forward(self, x):
        q, k, v = self._qkv(x)
        p = self.attn_dropout if self.training else 0.0
        return self._out(F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True))

    def forward_cached(self, x, kv, allowed, window, src):
        """kv: (2, B, H, max_ctx, hd) cache of this layer; allowed: (k, max_ctx) bool;
        window: (max_ctx,) bool, positions this step writes; src: (max_ctx,) int64 index
        into the k new rows for each cache position (clamped, only used inside window)."""
        q, k_new, v_new = self._qkv(x)
        # Gather + Where instead of a scatter: exact, and plain elementwise ops in ONNX/TRT.
        w = window[:, None]
        k_all = torch.where(w, k_new.index_select(2, src), kv[0])
        v_all = torch.where(w, v_new.index_select(2, src), kv[1])
        att = (q @ k_all.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(~allowed, float("-inf"))
        # softmax in fp32 even for fp16 weights: the cast is explicit in the exported graph
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        return self._out(att @ v_all), torch.stack((k_all, v_all))

    def forward_rows(self, x, k_cache, v_cache, keep, place, allowed):
        """forward_cached for a batch whose rows sit at their own positions, with the cache
        read-only. k_cache, v_cache: (B, H, max_ctx, hd) of this layer; keep: (B, 1, T, 1)
        1.0 where the cache stands, 0.0 in each row's window; place: (B, 1, T, k) one-hot,
        new row j into cache position start + j; allowed: (B, k, T). Returns (y, k_new,
        v_new (B, H, k, hd)). The same values as forward_cached's Gather + Where (a one-hot
        product and a multiply by 1 or 0 are exact for finite numbers), in ops whose cost
        does not grow with each row's share of gathers and copies."""
        q, k_new, v_new = self._qkv(x)
        k_all = k_cache * keep + place @ k_new
        v_all = v_cache * keep + place @ v_new
        att = (q @ k_all.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(~allowed[:, None], float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        return self._out(att @ v_all), k_new, v_new


class MLP(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def forward_cached(self, x, kv, allowed, window, src):
        a, kv = self.attn.forward_cached(self.ln_1(x), kv, allowed, window, src)
        x = x + a
        return x + self.mlp(self.ln_2(x)), kv

    def forward_rows(self, x, k_cache, v_cache, keep, place, allowed):
        a, k_new, v_new = self.attn.forward_rows(
            self.ln_1(x), k_cache, v_cache, keep, place, allowed
        )
        x = x + a
        return x + self.mlp(self.ln_2(x)), k_new, v_new


class Policy(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.max_ctx, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = LayerNorm(cfg.n_embd, bias=cfg.bias)
        # Untied from wte: the vocab is small, and untied keeps export and safetensors plain.
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2 scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _depth(self, exit_layer: int | None) -> int:
        depth = self.cfg.n_layer if exit_layer is None else int(exit_layer)
        if not 1 <= depth <= self.cfg.n_layer:
            raise ValueError(f"exit_layer {exit_layer} outside [1, {self.cfg.n_layer}]")
        return depth

    def head(self, x):
        """Shared exit head: final norm + LM head (used by every exit)."""
        return self.lm_head(self.ln_f(x))

    # --- training ---------------------------------------------------------------------
    def _embed(self, idx):
        T = idx.shape[1]
        if T > self.cfg.max_ctx:
            raise ValueError(f"sequence length {T} exceeds max_ctx {self.cfg.max_ctx}")
        return self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))

    def _run_block(self, l: int, x):
        p = self.cfg.layer_dropout * l / max(self.cfg.n_layer - 1, 1)
        if not (self.training and p > 0):
            return self.blocks[l](x)
        keep = (torch.rand(x.shape[0], 1, 1, device=x.device) >= p).to(x.dtype)
        return x + keep * (self.blocks[l](x) - x)  # per-sample skip (LayerSkip)

    def forward(self, idx, exit_layer: int | None = None):
        """idx: (B, T) int64 vocab ids from position 0 -> logits (B, T, V) at the exit."""
        x = self._embed(idx)
        for l in range(self._depth(exit_layer)):
            x = self._run_block(l, x)
        return self.head(x)

    def forward_all_exits(self, idx, positions=None) -> dict[int, torch.Tensor]:
        """One pass, logits at every depth in cfg.depths (for the early-exit loss).
        positions: optional (P,) index tensor; then logits are (B, P, V) at those positions
        only (the head is a quarter of a training step's cost when applied everywhere)."""
        x, out = self._embed(idx), {}
        for l in range(self.cfg.n_layer):
            x = self._run_block(l, x)
            if l + 1 in self.cfg.depths:
                out[l + 1] = self.head(x if positions is None else x[:, positions])
        return out

    # --- deployment -------------------------------------------------------------------
    def new_kv(self, batch: int = 1, dtype=None, device=None):
        """Zeroed KV cache of shape cfg.kv_shape(batch)."""
        p = self.wte.weight
        return torch.zeros(
            self.cfg.kv_shape(batch), dtype=dtype or p.dtype, device=device or p.device
        )

    def step(self, tokens, start_pos, kv, exit_layer: int | None = None):
        """Decode k tokens at positions [start_pos, start_pos + k).

        tokens: (B, k) int64; start_pos: int or int64 tensor (scalar or (1,));
        kv: (n_layer, 2, B, H, max_ctx, hd). Returns (logits (B, k, V), kv_out).
        Only the first `exit_layer` layers run and write their KV; deeper layers' entries
        pass through unchanged, so a later full-depth step over the same positions
        (verify) rewrites every layer there. Caller guarantees start_pos + k <= max_ctx.
        Pure function of its inputs: kv is not modified in place.
        """
        depth = self._depth(exit_layer)
        k, T = tokens.shape[1], self.cfg.max_ctx
        if not torch.is_tensor(start_pos):  # (a tensor stays a graph input when exported)
            if not 0 <= start_pos <= T - k:
                raise ValueError(f"positions [{start_pos}, {start_pos + k}) exceed max_ctx {T}")
            start_pos = torch.tensor(start_pos, dtype=torch.int64, device=tokens.device)
        start = start_pos.reshape(1)
        pos = start + torch.arange(k, device=tokens.device)  # (k,)
        cols = torch.arange(T, device=tokens.device)  # (T,)
        allowed = cols[None, :] <= pos[:, None]  # (k, T)
        window = (cols >= start) & (cols < start + k)  # (T,)
        src = (cols - start).clamp(0, k - 1)  # (T,)
        x = self.wte(tokens) + self.wpe(pos)
        layers = []
        for l in range(depth):
            x, kv_l = self.blocks[l].forward_cached(x, kv[l], allowed, window, src)
            layers.append(kv_l)
        layers.extend(kv[l] for l in range(depth, self.cfg.n_layer))
        return self.head(x), torch.stack(layers)

    def step_rows(self, tokens, start_pos, caches, exit_layer: int | None = None):
        """`step` for a batch whose rows are separate sequences at their own positions.

        tokens: (B, k) int64; start_pos: (B,) int64, row b runs positions
        [start_pos[b], start_pos[b] + k); caches: per layer a (k, v) pair, each
        (B, H, max_ctx, hd), read only. Row b attends to its own cache row and its own new
        tokens only, so its logits are what `step` gives that row alone, to the bit.
        Returns (logits (B, k, V), kv_new (depth, 2, B, H, k, hd)): the new positions' KV of
        the layers run, for the caller to write at each row's window. Caller keeps every
        start_pos + k <= max_ctx.
        """
        depth = self._depth(exit_layer)
        k, T = tokens.shape[1], self.cfg.max_ctx
        start = start_pos.reshape(-1, 1)  # (B, 1)
        pos = start + torch.arange(k, device=tokens.device)  # (B, k)
        cols = torch.arange(T, device=tokens.device)  # (T,)
        allowed = cols[None, None, :] <= pos[:, :, None]  # (B, k, T)
        window = (cols[None, :] >= start) & (cols[None, :] < start + k)  # (B, T)
        src = (cols[None, :] - start).clamp(0, k - 1)  # (B, T)
        dtype = self.wte.weight.dtype
        place = (
            (src[:, :, None] == torch.arange(k, device=tokens.device)) & window[:, :, None]
        ).to(dtype)[:, None]  # (B, 1, T, k)
        keep = (~window).to(dtype)[:, None, :, None]  # (B, 1, T, 1)
        x = self.wte(tokens) + self.wpe(pos)
        new = []
        for l in range(depth):
            x, k_new, v_new = self.blocks[l].forward_rows(x, *caches[l], keep, place, allowed)
            new.append(torch.stack((k_new, v_new)))
        return self.head(x), torch.stack(new)
