"""Finding NaN/Inf in weights fast enough to do it on every load.

A model holding NaN/Inf outputs NaN for every token, so loading refuses one (naming the tensors).
The check reads every weight once; to cost less than the rest of a load it is a single reduction
per tensor (NaN and Inf always reach a sum of squares; a finite one may overflow, so a "yes" is
confirmed element by element), done by numpy on worker threads (numpy releases the GIL) while the loader
builds the model. torch's own reductions would wake its thread pool for each of ~150 tensors,
which on a busy machine costs ten times more than the arithmetic.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from gptcore.io.checkpoints import LoadError


def may_hold_non_finite(t: torch.Tensor) -> bool:
    """A screen that never says "no" wrongly: False means every element is finite."""
    if t.dim() == 2 and not t.is_contiguous() and t.t().is_contiguous():
        t = t.t()  # a Conv1D view: the same elements, in storage order
    if t.device.type == "cpu" and t.is_contiguous():
        if t.dtype == torch.bfloat16:  # no bf16 in numpy: all-ones exponent bits mean NaN/Inf
            bits = t.view(torch.int16).numpy()
            return bool(np.any((bits & 0x7F80) == 0x7F80))
        flat = t.numpy().reshape(-1)
        with np.errstate(all="ignore"):
            # fp32/fp64: BLAS's dot product (a·a) is the fastest full read numpy has; NaN/Inf reach it
            total = np.dot(flat, flat) if flat.dtype != np.float16 else np.add.reduce(flat)
        return not np.isfinite(total)
    return not bool(torch.isfinite(t.sum()))


def non_finite_flag(t: torch.Tensor) -> torch.Tensor:
    """`may_hold_non_finite` for a tensor on an accelerator, left there: a 0-dim bool tensor, True when
    the sum is not finite. A loader stacks them and reads them back once (a read per tensor would
    wait for the device ~150 times)."""
    return ~torch.isfinite(t.sum())


def count_non_finite(t: torch.Tensor) -> int:
    return int((~torch.isfinite(t)).sum())


class BackgroundScreen:
    """`may_hold_non_finite` for many tensors, started now, answered on `result(key)`."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        workers = max(1, min(4, os.cpu_count() or 1))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gptcore-nonfinite")
        self._futures: dict[str, Future] = {k: self._pool.submit(may_hold_non_finite, t) for k, t in tensors.items()}

    def __contains__(self, key: str) -> bool:
        return key in self._futures

    def result(self, key: str) -> bool:
        return self._futures[key].result()

    def __enter__(self) -> "BackgroundScreen":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def non_finite_error(path: Path, bad: list[tuple[str, int, int, bool]], dtype_name: str) -> LoadError:
    """The message for `bad` = [(tensor, non-finite count, numel, finite before the dtype cast)]."""
    listed = ", ".join(f"{key} ({n:,} of {numel:,})" for key, n, numel, _ in bad[:8]) + (" …" if len(bad) > 8 else "")
    if all(overflow for *_, overflow in bad):
        return LoadError(f"{path}: weights overflow {dtype_name} (values too large become Inf): {listed}; "
                         f"load in bf16 or fp32 instead")
    return LoadError(f"{path}: refused, weights hold NaN/Inf values: {listed}. A model with them outputs NaN for "
                     f"every token; the checkpoint is broken (a diverged training run?) — load an earlier one")
