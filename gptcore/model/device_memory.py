"""How many bytes a device has free for new tensors: the one answer the loader, the training's
memory check and the app's build refusal all ask for (they refuse up front, naming both sizes,
rather than let the allocator fail halfway through).
"""
from __future__ import annotations

import os

import torch


def free_bytes(device) -> int | None:
    """Bytes free for new tensors on `device` now, or None when it cannot be told (Apple MPS).

    CUDA: what the driver reports free, plus what torch's caching allocator holds but no tensor uses
    (it hands that out first). CPU: MemAvailable from /proc/meminfo, else free pages × page size on
    other Unixes (an underestimate, the safe side)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        cached = 0
        if torch.cuda.is_initialized():  # asking an uninitialised allocator would start CUDA for nothing
            cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free) + max(0, int(cached))
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
