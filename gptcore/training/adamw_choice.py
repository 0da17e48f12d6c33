"""Whether AdamW runs torch's fused kernel on a CPU: decided by timing one optimizer step of the
run's own parameter shapes both ways, cached per machine and shape (as autocast_choice.py does
for bfloat16).

Why a measurement: the fused kernel is one pass over the parameters where torch's default CPU
AdamW makes a dozen, and on the machines measured so far it was far faster (AMD EPYC, 1 thread:
0.7 vs 6.2 ms a step at the CPU recipe's 0.8M parameters, 85 vs 635 ms at GPT-2 124M) — but it is
a newer kernel whose speed depends on the CPU's vector units and torch's build, and a step's
worth of timing settles it for the machine at hand. CUDA always takes the fused kernel (nanoGPT's
choice there: one launch instead of hundreds); other devices the default one.

The timed copies are clones of the parameters with random gradients, each kind built, warmed up,
timed (median of a few steps) and freed before the other, so the model and the random state are
untouched. The two kernels compute the same update up to the last float bits.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from gptcore.training import timing_cache
from gptcore.training.autocast_choice import machine_key

CACHE_FILE = "adamw_speed.json"
CACHE_VERSION = 1
REPS = 3
SLOW_STEP_S = 0.5  # a warm-up step slower than this: time one step of each kind, not REPS


@dataclasses.dataclass(frozen=True)
class FusedChoice:
    """What AdamW runs on a CPU, and why: the measured ms of one step each way ("measured" now or
    "cached" from an earlier run on this machine)."""

    fused: bool
    fused_ms: float | None
    plain_ms: float | None
    source: str

    def describe(self) -> str:
        """'AdamW fused: 0.7 ms/step vs plain 6.2 ms/step → fused (measured now)'."""
        if self.fused_ms is None or self.plain_ms is None:
            return f"AdamW {'fused' if self.fused else 'plain'} ({self.source})"
        when = "measured now" if self.source == "measured" else "measured before, cached"
        return (f"AdamW fused: {self.fused_ms:.1f} ms/step vs plain {self.plain_ms:.1f} ms/step → "
                f"{'fused' if self.fused else 'plain'} ({when})")


def cache_path() -> Path:
    return timing_cache.cache_file(CACHE_FILE)


def shape_key(params: Sequence[torch.Tensor]) -> str:
    """The parameters' count and size: what the step's time depends on besides the machine."""
    return f"{len(params)} tensors, {sum(p.numel() for p in params)} numbers"


def choose_cpu_fused(groups: list[dict], *, cache: Path | None = None,
                     measure: Callable[[list[dict]], tuple[float, float]] | None = None) -> FusedChoice:
    """Fused or plain AdamW for the parameter `groups` (optimizer_groups' list) on the CPU: from
    the cache when this machine has timed these shapes, else timed now (`measure(groups)` ->
    (fused ms, plain ms)) and cached. Fused where it is not slower."""
    params = [p for g in groups for p in g["params"]]
    cache = cache_path() if cache is None else cache
    (fused_ms, plain_ms), source = timing_cache.cached_or_measured(
        cache, CACHE_VERSION, ("fused_ms", "plain_ms"), machine_key(), shape_key(params),
        lambda: (measure or time_both)(groups))
    return _decide(fused_ms, plain_ms, source)


def _decide(fused_ms: float, plain_ms: float, source: str) -> FusedChoice:
    return FusedChoice(fused_ms <= plain_ms, float(fused_ms), float(plain_ms), source)


def time_both(groups: list[dict], reps: int = REPS) -> tuple[float, float]:
    """(fused, plain) median ms of one AdamW step over clones of the groups' parameters with
    random gradients (its own generator: the global random stream does not move)."""
    g = torch.Generator().manual_seed(0)
    return _time_kind(groups, {"fused": True}, reps, g), _time_kind(groups, {}, reps, g)


def _time_kind(groups: list[dict], extra: dict, reps: int, generator: torch.Generator) -> float:
    copies = []
    for group in groups:
        params = []
        for p in group["params"]:
            clone = p.detach().clone().requires_grad_(True)
            clone.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype) * 1e-3
            params.append(clone)
        copies.append({"params": params, "weight_decay": group.get("weight_decay", 0.0)})
    optimizer = torch.optim.AdamW(copies, lr=1e-4, **extra)
    warm = _timed(optimizer)  # builds the state
    times = [_timed(optimizer) for _ in range(1 if warm > SLOW_STEP_S else reps)]
    return 1000 * statistics.median(times)


def _timed(optimizer: torch.optim.Optimizer) -> float:
    start = time.perf_counter()
    optimizer.step()
    return time.perf_counter() - start
