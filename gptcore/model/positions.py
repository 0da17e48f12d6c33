"""Position information without a learned table: sinusoidal (added to the embedding, as in the
original Transformer) and rotary (RoPE: queries and keys rotated by their position, as in Llama).

Neither holds a parameter or a buffer. Both are computed from the positions of the tokens being
fed, so a model built on the meta device and filled by a loader needs nothing more, and a KV
cache step at position p gets exactly the angles a full forward gives position p.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class SinusoidalPositions(nn.Module):
    """PE(p, 2i) = sin(p / 10000^(2i/C)), PE(p, 2i+1) = cos(p / 10000^(2i/C)) (Vaswani et al. 2017).

    Called like the learned table (`pos_embed(pos)` -> (T, C)), so the model adds either the
    same way; it has no parameters, which is the whole point of the lesson's exercise."""

    def __init__(self, n_embd: int, base: float = 10000.0):
        super().__init__()
        self.n_embd = n_embd
        self.base = base

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        half = torch.arange(0, self.n_embd, 2, device=pos.device, dtype=torch.float32)  # (C/2,) = 2i
        inv_freq = torch.exp(half * (-math.log(self.base) / self.n_embd))  # (C/2,) = 1 / base^(2i/C)
        angles = pos.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, C/2)
        table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, C/2, 2): sin, cos side by side
        return table.flatten(1)  # (T, C), even columns sin, odd columns cos

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, base={self.base:g}"


class RotaryPositions(nn.Module):
    """cos and sin of the rotary angles for given positions: (T, hs) each.

    Llama's convention (the one Hugging Face checkpoints are trained with): dimension j of a
    head is paired with j + hs/2 ("rotate half"), pair i turns by p · theta^(-2i/hs). The angles
    are computed in float32 as transformers does, then cast to the activations' dtype."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.head_dim = head_dim
        self.theta = float(theta)

    def forward(self, pos: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        exponents = torch.arange(0, self.head_dim, 2, device=pos.device, dtype=torch.int64).to(torch.float32)
        inv_freq = 1.0 / (self.theta ** (exponents / self.head_dim))  # (hs/2,)
        angles = pos.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, hs/2)
        angles = torch.cat((angles, angles), dim=-1)  # (T, hs): pair i at columns i and i + hs/2
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta:g}"


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (j, j + hs/2) pair of x (B, T, heads, hs) by the angles of its position.

    cos, sin: (T, hs). (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # (B, T, heads, hs/2) each
    rotated_half = torch.cat((-x2, x1), dim=-1)  # (B, T, heads, hs)
    return x * cos[:, None, :] + rotated_half * sin[:, None, :]  # (B, T, heads, hs)
