"""Which device the session runs on, and whether a new model fits in its memory. No Qt.

Apart from the session because the app asks these questions before any session exists
(`--device cuda` is checked before the first paint) and the build refusal is a rule of
its own: refuse up front, with the estimate, rather than let the allocator fail halfway.
"""
from __future__ import annotations

import os

import torch

from gptcore.model.config import GPTConfig
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
    """Bytes free for new tensors on `device`: VRAM from the driver, RAM from /proc/meminfo."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:  # other Unixes: free pages × page size (an underestimate, which is the safe side)
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: do not refuse on a guess


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
