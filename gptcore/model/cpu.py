"""What the CPU is: its model name and feature flags, read once from /proc/cpuinfo.

Why here, in the model layer: the model's own fast paths (packed_bf16.py's packed bf16 product)
ask whether the CPU has native bf16 instructions, and so do training (speed.py: autocast) and the
benches (every figure names its machine). The lowest layer that needs it holds it, so nothing in
gptcore/model imports upwards. The flags choose a *kernel* only; whether bf16 is worth using at
all is measured (gptcore/generation/decode_timing.py), since a CPU without them still decodes
faster in bf16 when decoding is memory-bound (issue 34).
"""
from __future__ import annotations

import functools
import platform


def _cpuinfo_field(prefix: str) -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (avx512_bf16, amx_bf16, ...); empty elsewhere."""
    return frozenset((_cpuinfo_field("flags") or "").split())


@functools.lru_cache(maxsize=None)
def cpu_name() -> str:
    """The CPU's model name ("AMD EPYC 9B14"), from /proc/cpuinfo where there is one."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown CPU"


def native_bf16(device_type: str = "cpu") -> bool:
    """True where bfloat16 matrix products run in hardware: a CUDA GPU that supports them, or an
    x86 CPU with avx512_bf16 or AMX (Intel Sapphire Rapids+, AMD Zen 4+) and torch's oneDNN."""
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type != "cpu":
        return False
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"}) and torch.backends.mkldnn.is_available()
