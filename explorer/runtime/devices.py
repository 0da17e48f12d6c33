"""Which device the session runs on, and whether a new model fits in its memory. No Qt.

Apart from the session because the app asks these questions before any session exists
(`--device cuda` is checked before the first paint) and the build refusal is a rule of
its own: refuse up front, with the estimate, rather than let the allocator fail halfway.
"""
from __future__ import annotations

import torch

from gptcore.model.config import GPTConfig
from gptcore.model.device_memory import free_bytes
from gptcore.errors import UserError
from gptcore.model.params import count_parameters, format_bytes


class BuildRefused(UserError):
    """A build that would not fit in memory; the message carries the estimate."""

    title = "Model too large to build"


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """'auto'/None -> the best device present; anything else checked, with a message naming the fix.
    One rule for the app and gptcore: the same function decides where a load lands."""
    from gptcore.io.loading import resolve_device as resolve

    return resolve(device)


def available_memory(device: torch.device) -> int:
    """Bytes free for new tensors on `device` (gptcore's one answer: VRAM from the driver, RAM from
    /proc/meminfo); when it cannot be told, a figure that refuses nothing (no refusal on a guess)."""
    free = free_bytes(device)
    return (1 << 62) if free is None else free


def build_memory_estimate(cfg: GPTConfig) -> int:
    """Bytes a fresh fp32 model needs: the weights, plus one layer's largest matrix drawn on
    the CPU by the initialiser before it is copied into place."""
    count = count_parameters(cfg)
    largest = max(cfg.vocab_size, cfg.d_mlp, 3 * cfg.n_embd) * cfg.n_embd
    return count.memory_bytes("fp32") + 4 * largest


def check_fits(cfg: GPTConfig, device: torch.device) -> None:
    """Raise BuildRefused, naming the estimate and the fix, when `cfg` would not fit on `device`."""
    need, have = build_memory_estimate(cfg), available_memory(device)
    if need > have:
        count = count_parameters(cfg)
        raise BuildRefused(
            f"This model needs about {format_bytes(need)} ({count.total:,} parameters in fp32) "
            f"but only {format_bytes(have)} is free on {device}. Pick a smaller config "
            f"(fewer layers, a narrower n_embd or a smaller vocabulary), or close other programs."
        )
