"""The two norms a GPT here may use, and the one that builds the configured one.

A module of their own so that whoever must recognise a norm (init.py's schemes fill its gain with
ones) can ask `isinstance` without importing the GPT (which imports init.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.model.config import GPTConfig
from gptcore.model.hooks import HookPoint


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


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight (Zhang & Sennrich 2019; Llama): no mean subtracted,
    no bias, whatever `bias` says."""

    def __init__(self, ndim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # (B, T, C)
        return self.hook_normalized(y)


def make_norm(config: GPTConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return RMSNorm(config.n_embd, config.layer_norm_eps)
    return LayerNorm(config.n_embd, config.bias, config.layer_norm_eps)
