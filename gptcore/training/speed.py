"""What makes a training step fast on this machine: bfloat16 where it is measured faster,
torch's fused AdamW, and no OpenMP spin-waiting.

Measured on the CPU recipe (4 layers, 4 heads, 128 wide, block 64, batch 12; `python -m gptcore.bench --train`):
- bfloat16 autocast ran the matrix products 2.5x faster on an AMD EPYC with avx512_bf16 (oneDNN's
  kernels), but a whole step 10x *slower* on an AMD EPYC without avx512 (704 vs 70 ms/iter), where
  torch emulates it. The flags below do not decide a run's dtype: "auto" times the run's own model
  both ways (autocast_choice.py); `native_bf16` remains a hint for other fast paths;
- attention stays float32 under CPU autocast (model._fused_attention: torch's CPU flash kernel
  is 3x slower in bfloat16 than in float32 at this shape);
- AdamW's fused CPU kernel, where one timed step of the run's parameters finds it faster
  (adamw_choice.py, cached per machine; 0.7 vs 6.2 ms at the CPU recipe on an AMD EPYC, 1 thread);
  `Trainer(..., fused=False)` is train.py's CPU step bitwise;
- torch.compile stays off on a CPU unless asked (TrainConfig.compile; the compile costs minutes);
- OpenMP's default spin-wait made 2 threads 3-6x slower than 1 while another process was busy;
  OMP_WAIT_POLICY=PASSIVE avoids it but must be set before torch is imported (gptcore.train and
  the bench set it; a script that imports torch first decides for itself).
"""
from __future__ import annotations

import torch

from gptcore.model.cpu import cpu_flags, native_bf16  # the CPU facts live in the model layer (issue 32)
from gptcore.model.cpu import cpu_name as cpu_model

__all__ = ["cpu_flags", "cpu_model", "native_bf16", "use_tf32"]


def use_tf32(device) -> None:
    """train.py's setting on CUDA: float32 products on TF32 tensor cores (process-wide); nothing elsewhere."""
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
