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

from gptcore.model.cpu import cpu_flags, native_bf16  # the CPU facts live in the model layer (issue 32)

__all__ = ["cpu_flags", "fast_dtype", "native_bf16"]


def fast_dtype(device_type: str) -> str:
    """The autocast dtype a run on `device_type` should use by default: TrainConfig.dtype's name.
    (CUDA's choice is train.py's and lives in setup.py; this is the CPU's.)"""
    return "bfloat16" if device_type == "cpu" and native_bf16("cpu") else "float32"
