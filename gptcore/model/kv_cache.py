"""Keys and values kept between forwards: the cache decoding writes one token into at a time.

Two ways to address the same storage:

- `KVCache`: the write position is a Python int (`length`). Attention writes the new keys at
  `[length:length + T]` and reads `[:length + T]`, so every step has other shapes. Cheapest on a
  CPU, where the work is reading weights and a shorter key range is less of it.
- `StaticKVCache`: a view of a `KVCache` whose write position lives on the device. Attention
  writes with `index_copy_` at that position and reads the whole block, masking the slots not
  yet (or no longer) filled. Every step then has the same shapes and the same tensor addresses,
  which is what a CUDA graph needs: captured once, replayed for every token with only the
  position's value changed (gptcore/generation/decode_graphs.py). Whoever owns the position
  moves it (`position.fill_(length)` before a step); the forward never does, because a captured
  graph would not rerun that Python.

Both views share one storage, so a decoder can take the dynamic path for one step (a hook is
attached: a graph captured without it must not replay) and the static one for the next.
"""
from __future__ import annotations

import torch

from gptcore.model.config import GPTConfig


class KVCache:
    """Keys and values of every layer, preallocated to `block_size` so that decoding one
    token writes in place instead of concatenating (which would copy the whole cache).
    Holds the key/value heads only (grouped-query attention: n_head / n_kv_head times less);
    keys are stored already rotated when positions are rotary. `zeroed` fills it with zeros
    instead of leaving it uninitialised: a static view reads every slot, and a masked slot's
    value still meets a zero weight (0 · NaN would be NaN)."""

    def __init__(self, config: GPTConfig, batch: int, device, dtype, zeroed: bool = False):
        shape = (config.n_layer, batch, config.kv_heads, config.block_size, config.head_dim)
        make = torch.zeros if zeroed else torch.empty
        self.k = make(shape, device=device, dtype=dtype)  # (L, B, nkv, block, hs)
        self.v = make(shape, device=device, dtype=dtype)
        self.length = 0  # positions filled; the next token sits at position `length`
        self.capacity = config.block_size

    def reset(self) -> None:
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new keys and values (B, nkv, T, hs) at `length`; return everything up to
        them, (B, nkv, length + T, hs) each. The forward moves `length` on after the last layer."""
        B, T = k.shape[0], k.shape[2]
        past = self.length
        self.k[layer, :B, :, past:past + T] = k
        self.v[layer, :B, :, past:past + T] = v
        return self.k[layer, :B, :, :past + T], self.v[layer, :B, :, :past + T]  # (B, nkv, S, hs) each


class StaticKVCache:
    """`cache`'s storage with the write position on the device (see the module docstring).

    `positions(T)` is what the model calls at the start of a forward: the new tokens' positions
    (position .. position + T - 1) and, kept in `allowed`, which key slot each may see. The
    batch is the storage's whole batch."""

    def __init__(self, cache: KVCache):
        self.cache = cache
        self.k, self.v = cache.k, cache.v
        device = cache.k.device
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # the first new token's slot
        self.slots = torch.arange(cache.capacity, device=device)  # (S,) every key slot's position
        self.fed: torch.Tensor | None = None  # (T,) positions of the tokens fed now, set by positions()
        self.allowed: torch.Tensor | None = None  # (T, S) booleans, set by positions()
        self.bias: torch.Tensor | None = None  # (T, S) 0 where allowed, -inf elsewhere, in the cache's dtype

    def positions(self, T: int) -> torch.Tensor:
        """(T,) positions of the tokens fed now; sets `allowed` (T, S): slot s is visible to the
        token at position p when s <= p (filled and not in its future), and the same as an additive
        `bias` for the fused attention. Why both, once per forward: every layer reads them, and
        SDPA turns a boolean mask into a bias itself, two kernels per layer a graph would replay."""
        self.fed = self.position + self.slots[:T]  # (T,)
        self.allowed = self.slots[None, :] <= self.fed[:, None]  # (T, S)
        self.bias = torch.full(self.allowed.shape, float("-inf"), dtype=self.k.dtype,
                               device=self.k.device).masked_fill_(self.allowed, 0.0)  # (T, S)
        return self.fed

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, nkv, T, hs) at the positions `positions()` gave; return the whole block,
        (B, nkv, S, hs) each: the same shapes and addresses at every step."""
        self.k[layer].index_copy_(2, self.fed, k)  # (B, nkv, S, hs)
        self.v[layer].index_copy_(2, self.fed, v)
        return self.k[layer], self.v[layer]  # (B, nkv, S, hs) each
