"""The GPT itself, bottom-up: norms -> attention -> MLPs -> Block -> GPT.

Parameter names inside a block are HF GPT-2's (`c_attn`, `c_proj`, `c_fc`), so loading
a checkpoint is one renaming table plus four transposes (Conv1D stores W as (in, out)).
Top-level names (`embed`, `pos_embed`, `blocks`, `ln_final`, `unembed`) give
TransformerLens's hook names. Shapes: B batch, T new tokens, S keys (past + new),
nh heads, nkv key/value heads, hs head size, C = n_embd, H = d_mlp.

The modern parts are options of the same blocks (GPTConfig): the norm is `LayerNorm` or
`RMSNorm`, the MLP `MLP` (GELU) or `SwiGLUMLP`, positions a learned table, a sinusoidal one or
rotary angles (positions.py), and attention has `n_kv_head` key/value heads (grouped-query).
With the defaults the module tree, the names and the maths are GPT-2's.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from gptcore.model.config import GPTConfig
from gptcore.model.hooks import HookedModule, HookPoint, module_hooked
from gptcore.model.kv_cache import KVCache, StaticKVCache  # KVCache: importable from here as before
from gptcore.model.norms import LayerNorm, RMSNorm, make_norm  # noqa: F401 - LayerNorm, RMSNorm: their old home
from gptcore.model.linear import Linear, apply_linear  # Linear: nn.Linear with a guarded oneDNN fast path
from gptcore.model.positions import RotaryPositions, SinusoidalPositions, apply_rotary


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; with n_kv_head < n_head, grouped-query: query head h
    reads key/value head h // (n_head / n_kv_head), as in Llama. `c_attn` computes queries,
    keys and values in one matrix ((C + 2 · nkv · hs) rows), as GPT-2's does."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.n_kv_head = config.kv_heads
        self.head_dim = config.head_dim
        self.kv_dim = config.kv_dim
        self.c_attn = Linear(C, C + 2 * config.kv_dim, bias=config.use_qkv_bias)
        self.c_proj = Linear(C, C, bias=config.bias)
        self.dropout = config.dropout
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs)
        self.hook_k = HookPoint()  # (B, T, nkv, hs)
        self.hook_v = HookPoint()  # (B, T, nkv, hs)
        if config.pos_embedding == "rope":  # TransformerLens's names for the rotated q and k
            self.hook_rot_q = HookPoint()  # (B, T, nh, hs)
            self.hook_rot_k = HookPoint()  # (B, T, nkv, hs)
        self.hook_attn_scores = HookPoint()  # (B, nh, T, S), masked with -inf
        self.hook_pattern = HookPoint()  # (B, nh, T, S), rows sum to 1
        self.hook_z = HookPoint()  # (B, T, nh, hs)
        self.layer_index = 0  # set by GPT; picks this layer's slot in a KVCache

    @property
    def wants_pattern(self) -> bool:
        return self.hook_pattern.active or self.hook_attn_scores.active

    def forward(self, x: torch.Tensor, kv_cache: KVCache | StaticKVCache | None = None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x (B, T, C); `rotary` = (cos, sin), each (T, hs), for rotary positions."""
        B, T, C = x.shape
        nh, nkv, hs = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = apply_linear(self.c_attn, x).split((C, self.kv_dim, self.kv_dim), dim=2)  # (B, T, C), 2 × (B, T, nkv·hs)
        q = self.hook_q(q.view(B, T, nh, hs))  # (B, T, nh, hs)
        k = self.hook_k(k.view(B, T, nkv, hs))  # (B, T, nkv, hs)
        if rotary is not None:
            cos, sin = rotary  # (T, hs) each, for positions past .. past + T - 1
            q = self.hook_rot_q(apply_rotary(q, cos, sin))  # (B, T, nh, hs)
            k = self.hook_rot_k(apply_rotary(k, cos, sin))  # (B, T, nkv, hs)
        q = q.transpose(1, 2)  # (B, nh, T, hs)
        k = k.transpose(1, 2)  # (B, nkv, T, hs)
        v = self.hook_v(v.view(B, T, nkv, hs)).transpose(1, 2)  # (B, nkv, T, hs)

        past, allowed = 0, None  # allowed: (T, S) visible key slots, for a static cache's whole block
        if kv_cache is not None:
            if isinstance(kv_cache, StaticKVCache):
                allowed = kv_cache.allowed
            else:
                past = kv_cache.length
            k, v = kv_cache.update(self.layer_index, k, v)  # (B, nkv, S, hs) each
        S = k.shape[2]
        p_drop = self.dropout if self.training else 0.0
        grouped = nkv != nh  # SDPA shares each key/value head with its group of query heads

        if self.wants_pattern:
            # Explicit path: materialise scores and pattern only when someone listens.
            if grouped:
                k = k.repeat_interleave(nh // nkv, dim=1)  # (B, nh, S, hs)
                v = v.repeat_interleave(nh // nkv, dim=1)  # (B, nh, S, hs)
            # A bf16/fp16 model's scores and pattern are computed in fp32 from its q and k: what
            # the views show is the softmax itself, not a 3-digit rounding of it (issue 28).
            low = q.dtype in (torch.bfloat16, torch.float16)
            q32, k32 = (q.float(), k.float()) if low else (q, k)
            # Scaled and masked in place: the product is a fresh tensor, and two fewer (B, nh, T, S)
            # temporaries per layer is what this path costs above the fused one (issue 34).
            scores = q32 @ k32.transpose(-2, -1)  # (B, nh, T, S)
            hidden = _future_mask(T, S, past, x.device) if allowed is None else ~allowed  # (T, S)
            scores.mul_(1.0 / math.sqrt(hs)).masked_fill_(hidden, float("-inf"))
            scores = self.hook_attn_scores(scores)  # (B, nh, T, S)
            pattern = self.hook_pattern(F.softmax(scores, dim=-1))  # (B, nh, T, S)
            y = self.attn_dropout(pattern) @ (v.float() if low else v)  # (B, nh, T, hs)
            y = y.to(q.dtype)
        elif allowed is not None:  # static shapes: the whole block, slots not visible masked
            y = _fused_attention(q, k, v, attn_mask=kv_cache.bias, dropout_p=p_drop, enable_gqa=grouped)
        elif past == 0:
            y = _fused_attention(q, k, v, dropout_p=p_drop, is_causal=True, enable_gqa=grouped)
        elif T == 1:  # one query sees all keys
            y = _fused_attention(q, k, v, dropout_p=p_drop, enable_gqa=grouped)
        else:
            allowed = _causal_mask(T, S, past, x.device)
            y = _fused_attention(q, k, v, attn_mask=allowed, dropout_p=p_drop, enable_gqa=grouped)

        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs)
        y = z.reshape(B, T, C)  # heads side by side again
        return self.resid_dropout(apply_linear(self.c_proj, y))  # (B, T, C)


def _fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    """`scaled_dot_product_attention`, in float32 under CPU autocast. Why: autocast would run it
    in bfloat16, and torch's CPU flash kernel is slow there (CPU recipe's shape, B 12, 4 heads,
    T 64, head 32, forward + backward: 10 ms in bf16 vs 3 ms in fp32, AMD EPYC with avx512_bf16),
    while the matrix products around it are 2.5x faster in bf16. fp32 is also the safer softmax."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        mask = kwargs.get("attn_mask")
        if mask is not None and mask.is_floating_point():
            kwargs["attn_mask"] = mask.float()  # an additive mask must match the query's dtype
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kwargs)  # (B, nh, T, hs)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)  # (B, nh, T, hs)


def _causal_mask(T: int, S: int, past: int, device) -> torch.Tensor:
    """(T, S) booleans, True where query t (at position past + t) may see key s."""
    q_pos = torch.arange(past, past + T, device=device)[:, None]
    k_pos = torch.arange(S, device=device)[None, :]
    return k_pos <= q_pos


def _future_mask(T: int, S: int, past: int, device) -> torch.Tensor:
    """(T, S) booleans, True where key s lies after query t (at position past + t): the negation of
    `_causal_mask`, built directly rather than negated."""
    return torch.ones(T, S, dtype=torch.bool, device=device).triu_(past + 1)  # (T, S)


class MLP(nn.Module):
    """GPT-2's MLP: c_proj(GELU(c_fc(x))). GELU is GPT-2's tanh approximation ("gelu_new"), or
    with activation="gelu" the exact erf form nanoGPT's nn.GELU() computes."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, config.d_mlp, bias=config.bias)
        self.c_proj = Linear(config.d_mlp, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.hook_pre = HookPoint()  # (B, T, d_mlp)
        self.hook_post = HookPoint()  # (B, T, d_mlp)
        self.approximate = "tanh" if config.activation == "gelu_tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hook_pre.active or not isinstance(self.c_fc, Linear) or module_hooked(self.c_fc):
            h = self.hook_pre(apply_linear(self.c_fc, x))  # (B, T, d_mlp)
            h = F.gelu(h, approximate=self.approximate)  # (B, T, d_mlp)
        else:  # nobody reads the pre-activation: the linear and its GELU in one pass (linear.py)
            h = self.c_fc.forward_gelu(x, self.approximate)  # (B, T, d_mlp)
        h = self.hook_post(h)  # (B, T, d_mlp)
        return self.dropout(apply_linear(self.c_proj, h))  # (B, T, C)


class SwiGLUMLP(nn.Module):
    """Llama's MLP: c_proj(SiLU(c_gate(x)) * c_fc(x)) (Shazeer 2020). `c_fc` is Llama's up_proj,
    `c_gate` its gate_proj, `c_proj` its down_proj. Hooks as TransformerLens's gated MLP:
    hook_pre the gate before SiLU, hook_pre_linear the up projection, hook_post their product."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, config.d_mlp, bias=config.bias)
        self.c_gate = Linear(config.n_embd, config.d_mlp, bias=config.bias)
        self.c_proj = Linear(config.d_mlp, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.hook_pre = HookPoint()  # (B, T, H)
        self.hook_pre_linear = HookPoint()  # (B, T, H)
        self.hook_post = HookPoint()  # (B, T, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.hook_pre(apply_linear(self.c_gate, x))  # (B, T, H)
        up = self.hook_pre_linear(apply_linear(self.c_fc, x))  # (B, T, H)
        h = self.hook_post(F.silu(gate) * up)  # (B, T, H)
        return self.dropout(apply_linear(self.c_proj, h))  # (B, T, C)


def make_mlp(config: GPTConfig) -> nn.Module:
    return SwiGLUMLP(config) if config.mlp == "swiglu" else MLP(config)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1 = make_norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln2 = make_norm(config)
        self.mlp = make_mlp(config)
        self.pre_ln = config.ln_placement == "pre"
        self.residual = config.residual
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, x: torch.Tensor, kv_cache: KVCache | StaticKVCache | None = None, rotary=None) -> torch.Tensor:
        x = self.hook_resid_pre(x)  # (B, T, C)
        if self.pre_ln:  # GPT-2: x + f(LN(x))
            a = self.hook_attn_out(self.attn(self.ln1(x), kv_cache, rotary))
            x = self.hook_resid_mid(x + a if self.residual else a)
            m = self.hook_mlp_out(self.mlp(self.ln2(x)))
            return self.hook_resid_post(x + m if self.residual else m)
        # Post-LN (the original Transformer): LN(x + f(x))
        a = self.hook_attn_out(self.attn(x, kv_cache, rotary))
        x = self.hook_resid_mid(self.ln1(x + a if self.residual else a))
        m = self.hook_mlp_out(self.mlp(x))
        return self.hook_resid_post(self.ln2(x + m if self.residual else m))


# nn.Linear's reset calls kaiming_uniform_, which reaches this mode itself; the uniform_ it calls
# inside runs with the mode popped, so it must be caught at kaiming_uniform_ (measured: 0.08 s of
# a SmolLM2-135M load went to meta uniform_ decompositions before).
_SKIPPED_INITS = ("normal_", "uniform_", "kaiming_uniform_")


class _SkipMetaInit(TorchFunctionMode):
    """Makes torch's default random init of meta tensors a no-op. There is nothing to fill, yet
    the first `normal_` on a meta tensor (nn.Embedding's reset) imports torch's Python meta
    kernels and torch._dynamo: 3-5 s, more than a whole load of GPT-2 small."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        if getattr(func, "__name__", "") in _SKIPPED_INITS and isinstance(target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


class GPT(HookedModule):
    """GPT-2-class decoder. `GPT(cfg)` is initialised with the `gpt2` scheme; built under
    `torch.device("meta")` it allocates nothing (loading fills it with `assign=True`)."""

    def __init__(self, config: GPTConfig, init: str | None = "gpt2", seed: int | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.hook_embed = HookPoint()  # (B, T, C)
        self.pos_embed = self._positions(config)
        if config.pos_embedding != "rope":  # rotary positions add nothing to the stream
            self.hook_pos_embed = HookPoint()  # (1, T, C)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        for i, block in enumerate(self.blocks):
            block.attn.layer_index = i
        self.ln_final = make_norm(config)
        self.unembed = Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()
        self.setup_hooks()
        if init is not None and self.embed.weight.device.type != "meta":
            from gptcore.model.init import init_weights

            init_weights(self, init, seed=seed)

    @staticmethod
    def _positions(config: GPTConfig) -> nn.Module:
        """The position part: GPT-2's learned table, fixed sinusoids, or rotary angles."""
        if config.pos_embedding == "sinusoidal":
            return SinusoidalPositions(config.n_embd)
        if config.pos_embedding == "rope":
            return RotaryPositions(config.head_dim, config.rope_theta)
        return nn.Embedding(config.block_size, config.n_embd)

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

    def new_kv_cache(self, batch: int = 1, zeroed: bool = False) -> KVCache:
        return KVCache(self.config, batch, self.device, self.dtype, zeroed=zeroed)

    def forward(self, idx: torch.Tensor, kv_cache: KVCache | StaticKVCache | None = None, logits: str | None = "all"):
        """idx (B, T) token ids -> logits (B, T, vocab); `logits="last"` gives (B, 1, vocab)
        and `logits=None` skips the head (a capture run that only reads hook points).
        A `KVCache` is written at its `length`, which moves on by T; a `StaticKVCache` at its
        device-side `position`, which its owner moves (kv_cache.py: what a CUDA graph replays)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, tokens) token ids, got shape {tuple(idx.shape)}; "
                             "for one sequence pass idx[None]")
        B, T = idx.shape
        static = isinstance(kv_cache, StaticKVCache)
        if static:
            # Positions on the device (graphable): its owner keeps them inside the block.
            pos = kv_cache.positions(T)  # (T,)
        else:
            past = kv_cache.length if kv_cache is not None else 0
            if past + T > self.config.block_size:
                raise ValueError(
                    f"sequence of {past + T} tokens is longer than block_size={self.config.block_size}; "
                    f"crop the input to its last {self.config.block_size} tokens"
                )
            pos = torch.arange(past, past + T, device=idx.device)  # (T,)
        tok = self.hook_embed(self.embed(idx))  # (B, T, C)
        rotary = None
        if self.config.pos_embedding == "rope":
            rotary = self.pos_embed(pos, tok.dtype)  # cos, sin: (T, hs) each, shared by every layer
            x = self.drop(tok)  # (B, T, C)
        else:
            pos_emb = self.hook_pos_embed(self.pos_embed(pos).to(tok.dtype)[None])  # (1, T, C)
            x = self.drop(tok + pos_emb)  # (B, T, C)
        for block in self.blocks:
            x = block(x, kv_cache, rotary)
        if kv_cache is not None and not static:
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
