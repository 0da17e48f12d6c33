"""What makes a training step fast on this machine: bfloat16 where the CPU computes it natively,
torch's fused AdamW, and no OpenMP spin-waiting.

Measured on the CPU recipe (4 layers, 4 heads, 128 wide, block 64, batch 12; AMD EPYC with
avx512_bf16, 2 cores shared with other work; `python -m gptcore.bench --train`):
- the matrix products are ~60 % of a float32 step, and in bfloat16 they run 2.5x faster
  (oneDNN's avx512_bf16/AMX kernels). A CPU without those instructions emulates bfloat16 and
  gains nothing, so bfloat16 is chosen only where `native_bf16()` says the CPU has them;
- attention stays float32 under CPU autocast (model._fused_attention: torch's CPU flash kernel
  is 3x slower in bfloat16 than in float32 at this shape);
- AdamW's fused CPU kernel (Trainer's default, chosen in trainer.make_optimizer): 1.1 ms per
  step instead of the for-loop's 3.5 ms; `Trainer(..., fused=False)` is train.py's CPU step bitwise;
- OpenMP's default spin-wait made 2 threads 3-6x slower than 1 while another process was busy;
  OMP_WAIT_POLICY=PASSIVE avoids it but must be set before torch is imported (gptcore.train and
  the bench set it; a script that imports torch first decides for itself).
"""
from __future__ import annotations

import functools

@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (avx512_bf16, amx_bf16, ...); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(device_type: str = "cpu") -> bool:
    """True where bfloat16 matrix products run in hardware: a CUDA GPU that supports them, or an
    x86 CPU with avx512_bf16 or AMX (Intel Sapphire Rapids+, AMD Zen 4+) and torch's oneDNN."""
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type != "cpu":
        return False
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"}) and torch.backends.mkldnn.is_available()


def fast_dtype(device_type: str) -> str:
    """The autocast dtype a run on `device_type` should use by default: TrainConfig.dtype's name.
    (CUDA's choice is train.py's and lives in setup.py; this is the CPU's.)"""
    return "bfloat16" if device_type == "cpu" and native_bf16("cpu") else "float32"
