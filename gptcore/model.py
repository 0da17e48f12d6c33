"""The GPT itself, bottom-up: LayerNorm -> attention -> MLP -> Block -> GPT.

Parameter names inside a block are HF GPT-2's (`c_attn`, `c_proj`, `c_fc`), so loading
a checkpoint is one renaming table plus four transposes (Conv1D stores W as (in, out)).
Top-level names (`embed`, `pos_embed`, `blocks`, `ln_final`, `unembed`) give
TransformerLens's hook names. Shapes: B batch, T new tokens, S keys (past + new),
nh heads, hs head size, C = n_embd.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from .config import GPTConfig
from .hooks import HookedModule, HookPoint
from .linear import Linear, apply_linear  # Linear: nn.Linear with a guarded oneDNN fast path


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be switched off (torch's could not before 2.1)."""

    def __init__(self, ndim: int, bias: bool, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None
        self.eps = eps
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)  # (B, T, C)
        return self.hook_normalized(y)


class KVCache:
    """Keys and values of every layer, preallocated to `block_size` so that decoding one
    token writes in place instead of concatenating (which would copy the whole cache)."""

    def __init__(self, config: GPTConfig, batch: int, device, dtype):
        shape = (config.n_layer, batch, config.n_head, config.block_size, config.head_dim)
        self.k = torch.empty(shape, device=device, dtype=dtype)  # (L, B, nh, block, hs)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0  # positions filled; the next token sits at position `length`
        self.capacity = config.block_size

    def reset(self) -> None:
        self.length = 0


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.c_attn = Linear(C, 3 * C, bias=config.use_qkv_bias)
        self.c_proj = Linear(C, C, bias=config.bias)
        self.dropout = config.dropout
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs)
        self.hook_k = HookPoint()  # (B, T, nh, hs)
        self.hook_v = HookPoint()  # (B, T, nh, hs)
        self.hook_attn_scores = HookPoint()  # (B, nh, T, S), masked with -inf
        self.hook_pattern = HookPoint()  # (B, nh, T, S), rows sum to 1
        self.hook_z = HookPoint()  # (B, T, nh, hs)
        self.layer_index = 0  # set by GPT; picks this layer's slot in a KVCache

    @property
    def wants_pattern(self) -> bool:
        return self.hook_pattern.active or self.hook_attn_scores.active

    def forward(self, x: torch.Tensor, kv_cache: KVCache | None = None) -> torch.Tensor:
        B, T, C = x.shape
        nh, hs = self.n_head, self.head_dim
        q, k, v = apply_linear(self.c_attn, x).split(C, dim=2)  # 3 × (B, T, C)
        q = self.hook_q(q.view(B, T, nh, hs)).transpose(1, 2)  # (B, nh, T, hs)
        k = self.hook_k(k.view(B, T, nh, hs)).transpose(1, 2)  # (B, nh, T, hs)
        v = self.hook_v(v.view(B, T, nh, hs)).transpose(1, 2)  # (B, nh, T, hs)

        past = 0
        if kv_cache is not None:
            past = kv_cache.length
            i = self.layer_index
            kv_cache.k[i, :B, :, past:past + T] = k
            kv_cache.v[i, :B, :, past:past + T] = v
            k = kv_cache.k[i, :B, :, :past + T]  # (B, nh, S, hs)
            v = kv_cache.v[i, :B, :, :past + T]  # (B, nh, S, hs)
        S = past + T
        p_drop = self.dropout if self.training else 0.0

        if self.wants_pattern:
            # Explicit path: materialise scores and pattern only when someone listens.
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, S)
            allowed = _causal_mask(T, S, past, x.device)  # (T, S)
            scores = self.hook_attn_scores(scores.masked_fill(~allowed, float("-inf")))
            pattern = self.hook_pattern(F.softmax(scores, dim=-1))  # (B, nh, T, S)
            y = self.attn_dropout(pattern) @ v  # (B, nh, T, hs)
        elif past == 0:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=True)
        elif T == 1:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)  # one query sees all keys
        else:
            allowed = _causal_mask(T, S, past, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p_drop)

        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs)
        y = z.reshape(B, T, C)  # heads side by side again
        return self.resid_dropout(apply_linear(self.c_proj, y))  # (B, T, C)


def _causal_mask(T: int, S: int, past: int, device) -> torch.Tensor:
    """(T, S) booleans, True where query t (at position past + t) may see key s."""
    q_pos = torch.arange(past, past + T, device=device)[:, None]
    k_pos = torch.arange(S, device=device)[None, :]
    return k_pos <= q_pos


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, config.d_mlp, bias=config.bias)
        self.c_proj = Linear(config.d_mlp, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.hook_pre = HookPoint()  # (B, T, d_mlp)
        self.hook_post = HookPoint()  # (B, T, d_mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hook_pre(apply_linear(self.c_fc, x))  # (B, T, d_mlp)
        h = self.hook_post(F.gelu(h, approximate="tanh"))  # GPT-2's "gelu_new"
        return self.dropout(apply_linear(self.c_proj, h))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1 = LayerNorm(config.n_embd, config.bias, config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln2 = LayerNorm(config.n_embd, config.bias, config.layer_norm_eps)
        self.mlp = MLP(config)
        self.pre_ln = config.ln_placement == "pre"
        self.residual = config.residual
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, x: torch.Tensor, kv_cache: KVCache | None = None) -> torch.Tensor:
        x = self.hook_resid_pre(x)  # (B, T, C)
        if self.pre_ln:  # GPT-2: x + f(LN(x))
            a = self.hook_attn_out(self.attn(self.ln1(x), kv_cache))
            x = self.hook_resid_mid(x + a if self.residual else a)
            m = self.hook_mlp_out(self.mlp(self.ln2(x)))
            return self.hook_resid_post(x + m if self.residual else m)
        # Post-LN (the original Transformer): LN(x + f(x))
        a = self.hook_attn_out(self.attn(x, kv_cache))
        x = self.hook_resid_mid(self.ln1(x + a if self.residual else a))
        m = self.hook_mlp_out(self.mlp(x))
        return self.hook_resid_post(self.ln2(x + m if self.residual else m))


class _SkipMetaInit(TorchFunctionMode):
    """Makes torch's default random init of meta tensors a no-op. There is nothing to fill, yet
    the first `normal_` on a meta tensor (nn.Embedding's reset) imports torch's Python meta
    kernels and torch._dynamo: 3-5 s, more than a whole load of GPT-2 small."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        if getattr(func, "__name__", "") in ("normal_", "uniform_") and isinstance(target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


class GPT(HookedModule):
    """GPT-2-class decoder. `GPT(cfg)` is initialised with the `gpt2` scheme; built under
    `torch.device("meta")` it allocates nothing (loading fills it with `assign=True`)."""

    def __init__(self, config: GPTConfig, init: str | None = "gpt2", seed: int | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_embed = nn.Embedding(config.block_size, config.n_embd)
        self.hook_embed = HookPoint()  # (B, T, C)
        self.hook_pos_embed = HookPoint()  # (B, T, C)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        for i, block in enumerate(self.blocks):
            block.attn.layer_index = i
        self.ln_final = LayerNorm(config.n_embd, config.bias, config.layer_norm_eps)
        self.unembed = Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()
        self.setup_hooks()
        if init is not None and self.embed.weight.device.type != "meta":
            from .init import init_weights

            init_weights(self, init, seed=seed)

    @classmethod
    def empty(cls, config: GPTConfig, device=None) -> "GPT":
        """The structure with no weight drawn: on the meta device (nothing allocated; a loader
        fills it with `load_state_dict(assign=True)`), or uninitialised memory on `device`
        (for a caller that initialises it next, e.g. with `init_weights`)."""
        with torch.device("meta"), _SkipMetaInit():
            model = cls(config, init=None)
        if device is not None and torch.device(device).type != "meta":
            model = model.to_empty(device=device)
            model.tie_weights()  # to_empty gives the head its own tensor; share it again
        return model

    def tie_weights(self) -> None:
        """Share the Parameter itself (not a copy), so the head follows every update."""
        if self.config.tie_weights:
            self.unembed.weight = self.embed.weight

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # shared tensors counted once

    def new_kv_cache(self, batch: int = 1) -> KVCache:
        return KVCache(self.config, batch, self.device, self.dtype)

    def forward(self, idx: torch.Tensor, kv_cache: KVCache | None = None, logits: str | None = "all"):
        """idx (B, T) token ids -> logits (B, T, vocab); `logits="last"` gives (B, 1, vocab)
        and `logits=None` skips the head (a capture run that only reads hook points)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, tokens) token ids, got shape {tuple(idx.shape)}; "
                             "for one sequence pass idx[None]")
        B, T = idx.shape
        past = kv_cache.length if kv_cache is not None else 0
        if past + T > self.config.block_size:
            raise ValueError(
                f"sequence of {past + T} tokens is longer than block_size={self.config.block_size}; "
                f"crop the input to its last {self.config.block_size} tokens"
            )
        pos = torch.arange(past, past + T, device=idx.device)  # (T,)
        tok = self.hook_embed(self.embed(idx))  # (B, T, C)
        pos_emb = self.hook_pos_embed(self.pos_embed(pos)[None])  # (1, T, C)
        x = self.drop(tok + pos_emb)  # (B, T, C)
        for block in self.blocks:
            x = block(x, kv_cache)
        if kv_cache is not None:
            kv_cache.length = past + T
        if logits is None:
            return None
        if logits == "last":
            x = x[:, -1:, :]  # (B, 1, C)
        elif logits != "all":
            raise ValueError(f"logits must be 'all', 'last' or None, got {logits!r}")
        return self._unembed(self.ln_final(x))  # (B, T or 1, vocab)

    def _unembed(self, x: torch.Tensor) -> torch.Tensor:
        return apply_linear(self.unembed, x)  # (B, T, vocab); decoding: one row against the whole head
