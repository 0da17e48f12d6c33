"""How much arithmetic a training step does, and how fast this machine multiplies matrices: so the
training bench can print a step's achieved GFLOP/s beside the machine's measured peak, and the
distance to the limit is visible (issue 34: at the CPU recipe the fp32 step is compute-bound, so
parity with nanoGPT is the most one can expect where bf16 is not faster).

The work per step is nanoGPT's estimate_mfu (PaLM, Appendix B): 6·N flops per token for the
forward and backward of the N non-embedding parameters (nanoGPT's count: all but the position
table) plus 12·L·H·Q·T per token for attention's two T-long products, times the tokens of the step.
The peak is a square matrix product timed here, best of a few after a warm-up, in the dtype asked
(fp32 always; bf16 where the run's step uses bf16 autocast). On CUDA, MFU (model flops utilisation)
is that work per second over the GPU's bf16 dense peak from NVIDIA's datasheets (DATASHEET_TFLOPS,
by device name; nanoGPT's estimate_mfu divides by the A100's 312 whatever the GPU), and the
measured matrix-product peak is printed beside it, since a card may run below its datasheet.
"""
from __future__ import annotations

import time

import torch

from gptcore.benches.timing import sync
from gptcore.model.config import GPTConfig
from gptcore.model.params import count_parameters

PEAK_SIZE = 2048  # a 2048² product: 17 GFLOP, long enough to time, short enough to repeat
PEAK_REPS = 4


def flops_per_token(config: GPTConfig) -> int:
    """nanoGPT's estimate: 6·N + 12·L·H·Q·T (N non-embedding parameters, Q = head width)."""
    n = count_parameters(config).non_embedding
    q = config.n_embd // config.n_head
    return 6 * n + 12 * config.n_layer * config.n_head * q * config.block_size


def flops_per_iter(config: GPTConfig, sequences: int) -> int:
    """One optimizer step over `sequences` rows of block_size tokens (all micro-batches)."""
    return flops_per_token(config) * config.block_size * sequences


# bf16 dense tensor-core TFLOP/s (no sparsity) from NVIDIA's datasheets, by a part of the name torch
# reports (torch.cuda.get_device_name); the first match wins, so the more specific names come first.
DATASHEET_TFLOPS = (
    ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H200 NVL", 835.0), ("GH200", 989.0), ("H200", 989.0),
    ("H100", 989.0), ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0),
)
CUDA_PEAK_SIZE = 8192  # a 8192² product: 1.1 TFLOP, a few ms on a datacenter GPU


def datasheet_tflops(device_name: str) -> float | None:
    """The bf16 dense peak of the GPU named `device_name`, or None for one not in the table."""
    return next((tflops for part, tflops in DATASHEET_TFLOPS if part in device_name), None)


def matmul_peak(dtype: torch.dtype = torch.float32, n: int = PEAK_SIZE, reps: int = PEAK_REPS,
                device="cpu") -> float:
    """GFLOP/s of the best of `reps` (n × n) @ (n × n) products in `dtype` on `device`, after one
    untimed: what this machine's matrix-multiply kernels reach when nothing else limits them."""
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)  # (n, n)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)  # (n, n)
    torch.mm(a, b)
    sync(device)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b)  # (n, n)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9



def gflops(flops: float, ms: float) -> float:
    return flops / (ms / 1e3) / 1e9
