"""Which library multiplies ONE fp32 row by a weight faster on this machine: measured, not guessed.

Why: decoding feeds one row through every layer, and that product runs at the memory's speed only
with the right kernel for the CPU. On an AMD EPYC (avx512_bf16, no AMX) oneDNN's linear beat F.linear (MKL) for one row
against GPT-2 small's contiguous weights (decode step, CPU time, one thread: 43 vs 50 ms); on an
Intel Xeon MKL's gemv may be the faster (the issue's figures had us behind transformers there, whose
Conv1D runs MKL). Rather than choose by vendor name, the first one-row call times both on matrices
as large as GPT-2's MLP weights, more of them than a cache holds, interleaved, best of several
rounds, and keeps the faster for the process. Both compute the same product (to float32 rounding;
tests/gptcore/test_linear.py proves the oneDNN path against F.linear), so the choice only moves speed.

Costs ~40 MB and a few tens of ms once per process. `GPTCORE_ONEDNN=0` skips it (F.linear always).
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from gptcore.model.probed import ProbedPath

log = logging.getLogger(__name__)

ROWS, WIDTH, COPIES, ROUNDS = 3072, 768, 4, 5  # 4 × 9.4 MB: beyond an L2, around an L3's size


def measure(op: Callable[..., torch.Tensor], rows: int = ROWS, width: int = WIDTH, copies: int = COPIES,
            rounds: int = ROUNDS) -> tuple[float, float]:
    """Best seconds over `rounds` of one row through `copies` (rows, width) weights: (oneDNN, F.linear).
    No random numbers: the global stream is left alone, and values do not change the time."""
    weights = [torch.full((rows, width), 0.01 * (i + 1)) for i in range(copies)]  # (rows, width) each
    x = torch.full((1, width), 0.5)  # (1, width)
    best = [float("inf"), float("inf")]
    with torch.inference_mode():
        for w in weights:  # warm both (oneDNN builds its primitive at the first call)
            op(x, w, None, "none", [], "")
            F.linear(x, w)
        for _ in range(rounds):
            for side in (0, 1):
                start = time.perf_counter()
                for w in weights:
                    if side == 0:
                        op(x, w, None, "none", [], "")
                    else:
                        F.linear(x, w)
                best[side] = min(best[side], time.perf_counter() - start)
    return best[0], best[1]


def _decide(op_getter: Callable[[], Optional[Callable]]) -> Optional[bool]:
    op = op_getter()
    if op is None:
        return None
    onednn_s, plain_s = measure(op)
    faster = onednn_s <= plain_s
    log.info("one fp32 row: oneDNN %.2f ms, F.linear %.2f ms over %d weights of (%d, %d): %s", 1e3 * onednn_s,
             1e3 * plain_s, COPIES, ROWS, WIDTH, "oneDNN" if faster else "F.linear")
    return True if faster else None


def make_choice(op_getter: Callable[[], Optional[Callable]]) -> ProbedPath[bool]:
    """The process's choice: `.get()` is True for oneDNN, None for F.linear (decided at first use)."""
    return ProbedPath(lambda: _decide(op_getter), "one-row oneDNN linear", "one-row products use F.linear", log)
