"""Whether a CPU run trains under bfloat16 autocast or in float32 ("auto" dtype): decided by timing
the run's own model both ways, not by the CPU's flags.

Why a measurement: the flags do not predict it. bf16 autocast was 2.5x faster for the matrix
products on an AMD EPYC with avx512_bf16, 1.5x on an Intel Xeon with AMX, and 10x *slower* on an
AMD EPYC without avx512 (704 vs 70 ms/iter on the CPU recipe), where torch emulates bfloat16.
So at the start of a run a few forward+backward passes of the model at the run's micro-batch are
timed in each dtype (interleaved, warm-up excluded, the median kept) and bfloat16 is taken only
where it is clearly faster (below MARGIN × float32: it costs precision, and timings on shared cores
move by ~10 %). The optimizer step is left out: it is float32 either way.

The result is cached per machine (CPU model, torch version, threads) and model shape in a small
JSON file in the user's cache folder (platformdirs), so a run of the same shape on the same
machine decides at once; the run prints the figures and writes them into its trace and run.json
("autocast bf16: 34.0 ms/iter vs fp32 47.0 ms/iter → bf16"). An explicit --dtype is never
second-guessed; CUDA keeps train.py's choice (bf16 where supported, else float16).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.training import timing_cache
from gptcore.training.speed import cpu_model

MARGIN = 0.9  # bf16 must take under 90 % of float32's time to be chosen
CACHE_FILE = "autocast_speed.json"
CACHE_VERSION = 1
SLOW_STEP_S = 1.0  # a warm-up step slower than this: time one step each way, not three


@dataclasses.dataclass(frozen=True)
class AutocastChoice:
    """What "auto" became on a CPU, and why: the measured ms per forward+backward in each dtype
    (None when not measured) and where the figures came from ("measured", "cached")."""

    dtype: str  # "bfloat16" or "float32"
    bf16_ms: float | None
    fp32_ms: float | None
    source: str
    machine: str = ""

    def describe(self) -> str:
        """'autocast bf16: 34.0 ms/iter vs fp32 47.0 ms/iter → bf16 (measured now on <CPU>, ...)'."""
        short = "bf16" if self.dtype == "bfloat16" else "fp32"
        if self.bf16_ms is None or self.fp32_ms is None:
            return f"autocast: {short} ({self.source})"
        when = "measured now" if self.source == "measured" else "measured before, cached"
        return (f"autocast bf16: {self.bf16_ms:.1f} ms/iter vs fp32 {self.fp32_ms:.1f} ms/iter → {short} "
                f"({when} on {self.machine}; forward+backward of one micro-batch)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def machine_key() -> str:
    """The CPU model, torch's version and its thread count: what the timing depends on besides the model."""
    return f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def shape_key(config, batch_size: int) -> str:
    return (f"L{config.n_layer} H{config.n_head} d{config.n_embd} T{config.block_size} V{config.vocab_size} "
            f"B{batch_size}")


def cache_path() -> Path:
    return timing_cache.cache_file(CACHE_FILE)


def choose_cpu_autocast(model: nn.Module, batch_size: int, *, cache: Path | None = None,
                        measure: Callable[..., tuple[float, float]] | None = None) -> AutocastChoice:
    """bfloat16 or float32 for training `model` (a gptcore GPT: its `.config` gives the shape) on
    the CPU at `batch_size` sequences per micro-step; from the cache when this machine has timed
    this shape, else timed now (`measure(model, batch_size)` -> (bf16 ms, fp32 ms)) and cached."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "block_size"):
        return AutocastChoice("float32", None, None, "not measured: the model has no GPTConfig")
    cache = cache_path() if cache is None else cache
    machine = machine_key()
    (bf16_ms, fp32_ms), source = timing_cache.cached_or_measured(
        cache, CACHE_VERSION, ("bf16_ms", "fp32_ms"), machine, shape_key(config, batch_size),
        lambda: (measure or time_both)(model, batch_size))
    return _decide(bf16_ms, fp32_ms, source, machine)


def _decide(bf16_ms: float, fp32_ms: float, source: str, machine: str) -> AutocastChoice:
    dtype = "bfloat16" if bf16_ms < MARGIN * fp32_ms else "float32"
    return AutocastChoice(dtype, float(bf16_ms), float(fp32_ms), source, machine.split(" | ")[0])


def time_both(model: nn.Module, batch_size: int, reps: int = 3) -> tuple[float, float]:
    """(bf16 autocast, float32) median ms of one forward+backward of `model` on random ids
    (batch_size, block_size), interleaved, after one warm-up pass each. Leaves no trace on the
    model: gradients are put back as they were and torch's random state is restored (dropout
    draws from it), so a run is the same whether the answer was cached or measured."""
    config = model.config
    ids = torch.randint(0, config.vocab_size, (batch_size, config.block_size + 1),
                        generator=torch.Generator().manual_seed(0))  # (B, T + 1)
    x, y = ids[:, :-1].to(_device(model)), ids[:, 1:].to(_device(model))  # (B, T) each
    saved_grads = [p.grad for p in model.parameters()]
    rng = torch.get_rng_state()
    try:
        warm = _timed_pass(model, x, y, None)
        _timed_pass(model, x, y, torch.bfloat16)
        reps = 1 if warm > SLOW_STEP_S else reps
        times: dict = {torch.bfloat16: [], None: []}
        for _ in range(reps):
            for dtype in (None, torch.bfloat16):
                times[dtype].append(_timed_pass(model, x, y, dtype))
    finally:
        for p, g in zip(model.parameters(), saved_grads):
            p.grad = g
        torch.set_rng_state(rng)
    return 1000 * statistics.median(times[torch.bfloat16]), 1000 * statistics.median(times[None])


def _timed_pass(model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype) -> float:
    for p in model.parameters():
        p.grad = None
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))  # ()
    loss.backward()
    return time.perf_counter() - start


def _device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")

